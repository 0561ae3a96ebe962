// The hyphenated 8-4-4-4-12 hexadecimal UUID form (any version, either case): what the API
// accepts as a key or an id, what the relay sends as an event id, what ops commands take.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

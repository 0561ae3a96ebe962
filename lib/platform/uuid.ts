import { v7 as uuidV7 } from "uuid";

// The hyphenated 8-4-4-4-12 hexadecimal form, any version, either case.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

// A UUIDv7, increasing within this process, so each outbox write (and the relay's mark, not a HOT
// update) lands at the right-hand edge of the primary key.
export function newEventId(): string {
  return uuidV7();
}

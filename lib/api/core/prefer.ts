// RFC 7240 Prefer: only `wait=N` means anything here (hold a request whose key is in flight up
// to N seconds for the holder's outcome). Every other preference, and a `wait` whose value is
// not a non-negative integer of seconds, is ignored as RFC 7240 §2 asks of a preference a
// server does not understand: the request is answered as if it had none (docs/api.md).

/** Seconds at most: no request waits longer than the API's request timeout anyway. */
const MAX_WAIT_DIGITS = 6;
const WAIT = /^wait\s*=\s*"?(\d{1,6})"?$/i;

/** The `wait` preference in seconds, or undefined when there is none (or none well-formed). */
export function preferredWaitSeconds(header: string | null): number | undefined {
  if (header === null) return undefined;
  // Preferences are comma-separated; each may carry parameters after ';', which wait has none of.
  for (const preference of header.split(",")) {
    const token = preference.split(";")[0]!.trim();
    const match = WAIT.exec(token);
    if (match !== null && match[1]!.length <= MAX_WAIT_DIGITS) return Number(match[1]);
  }
  return undefined;
}

// RFC 7240 Prefer: only `wait=N` means anything here; other preferences are ignored (§2). A wait
// that is not whole seconds is a 400, or the client would never learn its wait was not applied.

/** Seconds at most: no request waits longer than the API's request timeout anyway. */
const MAX_WAIT_DIGITS = 6;
const WAIT = /^wait\s*=\s*"?(\d{1,6})"?$/i;
const WAIT_NAME = /^wait(\s*=|$)/i;

export type PreferWait =
  | { readonly kind: "none" }
  | { readonly kind: "wait"; readonly seconds: number }
  | { readonly kind: "invalid"; readonly detail: string };

/** The `wait` preference: none, its seconds, or a value that is not whole seconds. */
export function preferredWait(header: string | null): PreferWait {
  if (header === null) return { kind: "none" };
  for (const preference of header.split(",")) {
    const token = preference.split(";")[0]!.trim();
    if (!WAIT_NAME.test(token)) continue;
    const match = WAIT.exec(token);
    if (match !== null && match[1]!.length <= MAX_WAIT_DIGITS) return { kind: "wait", seconds: Number(match[1]) };
    return { kind: "invalid", detail: `Prefer: wait must be whole seconds, from 0 to ${"9".repeat(MAX_WAIT_DIGITS)}` };
  }
  return { kind: "none" };
}

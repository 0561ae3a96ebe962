// Masking of secrets before they reach a log line or an error message.

const MASK = "***";

/**
 * The URL with its password replaced by "***" (`postgres://app:***@db/x`). Input that does not
 * parse as a URL still has anything between "//user:" and "@" masked, so a malformed value
 * carrying a password is never echoed as is.
 */
export function maskUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === "") return url;
    parsed.password = MASK;
    return parsed.toString();
  } catch {
    // Unparsable: mask greedily up to the last "@" so a password containing "@" or ":" is covered.
    return url.replace(/^([^:/]*:?\/\/[^:@/]*:)(.*)@/s, `$1${MASK}@`);
  }
}

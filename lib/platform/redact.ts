// Masking of secrets before they reach a log line or an error message.
import { hmacSha256Hex } from "./sha256.ts";

const MASK = "***";

/**
 * The URL with its password replaced by "***" (`postgres://app:***@db/x`). Input that does not
 * parse as a URL still has anything between "user:" and the last "@" masked, so a malformed
 * value carrying a password is never echoed as is.
 */
export function maskUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return maskUserinfo(url);
  }
  if (parsed.password !== "") {
    parsed.password = MASK;
    return parsed.toString();
  }
  // No host: "user:secret@db" (no "//") parses as scheme "user:" with the rest as a path.
  return parsed.host === "" ? maskUserinfo(url) : url;
}

/** A list of URLs (MQTT_URL's brokers), each masked, comma-separated as configured. */
export function maskUrlList(urls: readonly string[]): string {
  return urls.map(maskUrl).join(",");
}

// Userinfo is what precedes the last "@" (after "//" when there is one); the password is its
// part after the first ":". Up to the last "@", so a password holding "@" or ":" is covered whole.
// The last "@" of the authority (up to the first "/", "?" or "#") when it holds one, so that
// an "@" in a list URL's query does not hide its hosts; else a raw "/", "?" or "#" in the
// password cut the authority short, and the last "@" of the whole text covers it.
function maskUserinfo(text: string): string {
  const authority = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(text)?.[0] ?? "";
  const at = authority.includes("@") ? authority.lastIndexOf("@") : text.lastIndexOf("@");
  if (at < 0) return text;
  const slashes = text.lastIndexOf("//", at);
  const colon = text.indexOf(":", slashes < 0 ? 0 : slashes + 2);
  if (colon < 0 || colon > at) return text;
  return `${text.slice(0, colon + 1)}${MASK}${text.slice(at)}`;
}

// Enough of an HMAC to tell one client's retries apart from another's in the logs (48 bits).
// Keyed, because a plain hash of a guessable key (`order-12345`) is reversed by dictionary, and
// the key is a bearer of its request's identity.
const KEY_HASH_HEX_CHARS = 12;
// A generated key is as long as the shortest API_KEY_HASH_SECRET accepted (config.ts).
const GENERATED_KEY_BYTES = 32;
// The process's HMAC key: API_KEY_HASH_SECRET, installed at start (useKeyHashSecret). One per
// process because the request log (lib/api/http/) and the jobs hash keys far from the config.
let hmacKey: Uint8Array | undefined;

/**
 * Makes `secret` the key of every keyHash in this process. Without one, a random key made now:
 * hashes then differ from another process's and from this one's next start, which `log` says
 * in one line (never the key).
 */
export function useKeyHashSecret(secret: Secret | undefined, log: { warn(msg: string, fields?: Record<string, unknown>): void }): void {
  if (secret !== undefined) {
    hmacKey = new TextEncoder().encode(secret.reveal());
    return;
  }
  hmacKey = crypto.getRandomValues(new Uint8Array(GENERATED_KEY_BYTES));
  log.warn("API_KEY_HASH_SECRET is not set: keyHash in the logs uses a random key made at start, so hashes will not match across restarts or processes");
}

/** What logs carry instead of an Idempotency-Key: the first hex digits of its HMAC-SHA256. */
export function keyHash(key: string): string {
  // A process that never installed a secret still never logs a hash a dictionary reverses.
  hmacKey ??= crypto.getRandomValues(new Uint8Array(GENERATED_KEY_BYTES));
  return hmacSha256Hex(hmacKey, key).slice(0, KEY_HASH_HEX_CHARS);
}

/**
 * keyHash(key) as a log field, computed only if a line is written (JSON.stringify calls
 * toJSON): at LOG_LEVEL=warn no request line is, and the HMAC would be paid by every POST for
 * nothing. The key lives in a closure, so inspecting the fields never shows it.
 */
export function keyHashField(key: string): { toJSON(): string } {
  return { toJSON: () => keyHash(key) };
}

/**
 * A secret that never prints itself: String(), JSON and inspection show "***"; only
 * reveal() gives the value, at the one place that sends it (the processor client).
 */
export class Secret {
  readonly #value: string;
  constructor(value: string) {
    this.#value = value;
  }
  reveal(): string {
    return this.#value;
  }
  toString(): string {
    return MASK;
  }
  toJSON(): string {
    return MASK;
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return MASK;
  }
}

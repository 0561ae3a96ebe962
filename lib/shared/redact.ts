// Masking of secrets before they reach a log line or an error message.
import { sha256Hex } from "./sha256.ts";

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

// Enough of a SHA-256 to tell one client's retries apart from another's in the logs
// (48 bits), and no way back to the key, which is a bearer of the request's identity.
const KEY_HASH_HEX_CHARS = 12;

/** What logs carry instead of an Idempotency-Key: the first hex digits of its SHA-256. */
export function keyHash(key: string): string {
  return sha256Hex(key).slice(0, KEY_HASH_HEX_CHARS);
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

// Masking of secrets before they reach a log line or an error message.
import { hmacSha256Hex } from "./sha256.ts";

const MASK = "***";

// The URL with its password replaced by "***" (`postgres://app:***@db/x`); input that does not parse
// as a URL still has anything between "user:" and the last "@" masked.
export function maskUrl(url: string): string {
  if (!URL.canParse(url)) return maskUserinfo(url);
  const parsed = new URL(url);
  if (parsed.password !== "") {
    parsed.password = MASK;
    return parsed.toString();
  }
  // No host: "user:secret@db" (no "//") parses as scheme "user:" with the rest as a path.
  return parsed.host === "" ? maskUserinfo(url) : url;
}

/** MQTT_URL's brokers, each masked, comma-separated as configured. */
export function maskUrlList(urls: readonly string[]): string {
  return urls.map(maskUrl).join(",");
}

// From the userinfo's first ":" to the authority's last "@" (an "@" in a query must not hide the
// hosts), else the text's last (a raw "/", "?" or "#" in the password cut the authority short).
function maskUserinfo(text: string): string {
  const authority = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(text)?.[0] ?? "";
  const at = authority.includes("@") ? authority.lastIndexOf("@") : text.lastIndexOf("@");
  if (at < 0) return text;
  const slashes = text.lastIndexOf("//", at);
  const colon = text.indexOf(":", slashes < 0 ? 0 : slashes + 2);
  if (colon < 0 || colon > at) return text;
  return `${text.slice(0, colon + 1)}${MASK}${text.slice(at)}`;
}

// 48 bits of the HMAC tell one client's retries from another's. Keyed, because a plain hash of a
// guessable key (`order-12345`) is reversed by dictionary.
const KEY_HASH_HEX_CHARS = 12;
const randomKey = (): Uint8Array => crypto.getRandomValues(new Uint8Array(32));
// Per process, because the request log and the jobs hash keys far from the config.
let hmacKey: Uint8Array | undefined;

/** Makes `secret` (or, warning, a random key) the key of every keyHash in this process. */
export function useKeyHashSecret(secret: Secret | undefined, log: { warn(msg: string, fields?: Record<string, unknown>): void }): void {
  hmacKey = secret ? new TextEncoder().encode(secret.reveal()) : randomKey();
  if (!secret) log.warn("API_KEY_HASH_SECRET is not set: keyHash in the logs uses a random key made at start, so hashes will not match across restarts or processes");
}

/** What logs carry instead of an Idempotency-Key: the first hex digits of its HMAC-SHA256. */
export function keyHash(key: string): string {
  hmacKey ??= randomKey();
  return hmacSha256Hex(hmacKey, key).slice(0, KEY_HASH_HEX_CHARS);
}

/** keyHash(key) as a log field, computed only if a line is written (JSON.stringify calls toJSON). */
export function keyHashField(key: string): { toJSON(): string } {
  return { toJSON: () => keyHash(key) };
}

/** A secret that never prints itself: String(), JSON and inspection show "***"; reveal() gives it. */
export class Secret {
  readonly #value: string;
  constructor(value: string) {
    this.#value = value;
  }
  static of(value: string | undefined): Secret | undefined {
    return value === undefined ? undefined : new Secret(value);
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

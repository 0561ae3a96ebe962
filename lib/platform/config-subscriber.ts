// The reference subscriber's way to the API (SUBSCRIBER_API_URL, SUBSCRIBER_API_TOKEN,
// SUBSCRIBER_GAP_FILL_AFTER_MS): with both set, a gap in an aggregate's sequence is filled from
// GET /charges/:id/events before the gap timeout (lib/subscriber/gap-fill.ts); with neither, the
// subscriber waits for the broker alone. The token is held as a Secret, never echoed.
import { ConfigError, integer, url, type Env } from "./config-values.ts";
import { Secret } from "./redact.ts";

export interface SubscriberApiConfig {
  /** The API's origin (a path prefix is kept). */
  readonly url: string;
  /** A bearer token of the tenant whose events the subscriber receives. */
  readonly token: Secret;
  /** How long a gap lasts before the API is asked. */
  readonly fillAfterMs: number;
}

// Milliseconds. A predecessor that is merely late (a share group, a relay's chain waiting one
// PUBACK per event) comes within a second or two; this leaves it that, and asks the API long
// before the gap timeout for one the broker lost (a session gone with a broker that kept none).
export const DEFAULT_GAP_FILL_AFTER_MS = 5000;
// A bearer token is one header value: visible ASCII, no spaces; its value is never shown.
const TOKEN_CHARS = /^[\x21-\x7e]{1,8192}$/;

/** The subscriber's API settings, or undefined when neither variable is set; `gapTimeoutMs` bounds the wait before asking. */
export function subscriberApiConfig(env: Env, gapTimeoutMs: number): SubscriberApiConfig | undefined {
  const rawUrl = env.SUBSCRIBER_API_URL?.trim() || undefined;
  const rawToken = env.SUBSCRIBER_API_TOKEN?.trim() || undefined;
  if (rawUrl === undefined && rawToken === undefined) return undefined;
  if (rawUrl === undefined) throw new ConfigError("SUBSCRIBER_API_TOKEN is set without SUBSCRIBER_API_URL; set both to fill gaps from the API, or neither");
  if (rawToken === undefined) throw new ConfigError("SUBSCRIBER_API_URL is set without SUBSCRIBER_API_TOKEN (a bearer token of the events' tenant); set both, or neither");
  if (!TOKEN_CHARS.test(rawToken)) throw new ConfigError(`SUBSCRIBER_API_TOKEN must be visible ASCII without spaces (length ${rawToken.length})`);
  const fillAfterMs = integer(env, "SUBSCRIBER_GAP_FILL_AFTER_MS", DEFAULT_GAP_FILL_AFTER_MS, 0, gapTimeoutMs);
  // Asked at the timeout or after it, the gap would already be skipped.
  if (fillAfterMs >= gapTimeoutMs) {
    throw new ConfigError(`SUBSCRIBER_GAP_FILL_AFTER_MS (${fillAfterMs}) must be less than SUBSCRIBER_GAP_TIMEOUT_MS (${gapTimeoutMs}): a gap is skipped at the timeout`);
  }
  return Object.freeze({ url: url(env, "SUBSCRIBER_API_URL", "", ["http:", "https:"]).replace(/\/+$/, ""), token: new Secret(rawToken), fillAfterMs });
}

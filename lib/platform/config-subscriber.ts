// The reference subscriber's way to the API: with SUBSCRIBER_API_URL and SUBSCRIBER_API_TOKEN
// set, a gap in an aggregate's sequence is filled from GET /charges/:id/events before the gap
// timeout (lib/subscriber/gap-fill.ts); with neither, it waits for the broker alone.
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

// One header value: visible ASCII, no spaces.
const TOKEN_CHARS = /^[\x21-\x7e]{1,8192}$/;

export function subscriberApiConfig(env: Env, gapTimeoutMs: number): SubscriberApiConfig | undefined {
  const rawUrl = env.SUBSCRIBER_API_URL?.trim() || undefined;
  const token = env.SUBSCRIBER_API_TOKEN?.trim() || undefined;
  if (rawUrl === undefined && token === undefined) return undefined;
  if (rawUrl === undefined) throw new ConfigError("SUBSCRIBER_API_TOKEN is set without SUBSCRIBER_API_URL; set both to fill gaps from the API, or neither");
  if (token === undefined) throw new ConfigError("SUBSCRIBER_API_URL is set without SUBSCRIBER_API_TOKEN (a bearer token of the events' tenant); set both, or neither");
  if (!TOKEN_CHARS.test(token)) throw new ConfigError(`SUBSCRIBER_API_TOKEN must be visible ASCII without spaces (length ${token.length})`);
  // A late predecessor (a share group, a relay's chain) comes within a second or two; a lost one
  // is asked for long before the gap timeout.
  const fillAfterMs = integer(env, "SUBSCRIBER_GAP_FILL_AFTER_MS", 5000, 0, gapTimeoutMs);
  if (fillAfterMs >= gapTimeoutMs) {
    throw new ConfigError(`SUBSCRIBER_GAP_FILL_AFTER_MS (${fillAfterMs}) must be less than SUBSCRIBER_GAP_TIMEOUT_MS (${gapTimeoutMs}): a gap is skipped at the timeout`);
  }
  const origin = url(env, "SUBSCRIBER_API_URL", "", ["http:", "https:"]).replace(/\/+$/, "");
  return Object.freeze({ url: origin, token: new Secret(token), fillAfterMs });
}

// The payment processor's settings (PAYMENT_PROCESSOR and friends, DEFAULT_CURRENCY); the key is
// held as a Secret, never echoed.
import { ConfigError, integer, oneOf, url, type Env } from "./config-values.ts";
import { Secret } from "./redact.ts";

// None (the ledger alone) or a processor that speaks Stripe's API.
const PROCESSOR_MODES = ["none", "stripe"] as const;

export type ProcessorConfig = ReturnType<typeof processorConfig>;

// Visible ASCII, no spaces.
const KEY_CHARS = /^[\x21-\x7e]{8,255}$/;

export function processorConfig(env: Env) {
  const mode = oneOf("PAYMENT_PROCESSOR", env.PAYMENT_PROCESSOR?.trim() || "none", PROCESSOR_MODES);
  const key = env.PAYMENT_PROCESSOR_KEY?.trim() || undefined;
  if (key !== undefined && !KEY_CHARS.test(key)) {
    throw new ConfigError(`PAYMENT_PROCESSOR_KEY must be 8 to 255 visible ASCII characters (length ${key.length})`);
  }
  if (mode === "stripe" && key === undefined) throw new ConfigError("PAYMENT_PROCESSOR_KEY is required with PAYMENT_PROCESSOR=stripe");
  const currency = env.DEFAULT_CURRENCY?.trim() || "usd";
  if (!/^[a-z]{3}$/.test(currency)) {
    throw new ConfigError(`DEFAULT_CURRENCY must be an ISO 4217 code in lower case (usd, eur, brl), got "${currency}"`);
  }
  return Object.freeze({
    mode,
    url: url(env, "PAYMENT_PROCESSOR_URL", "https://api.stripe.com", ["https:", "http:"]),
    key: Secret.of(key),
    // Room for Stripe's slow tail without a request waiting much beyond what a client waits.
    timeoutMs: integer(env, "PAYMENT_PROCESSOR_TIMEOUT_MS", 10_000, 100, 120_000),
    // An hour of the completer's back-off resolves any outage short of a disaster. At most 23 h:
    // Stripe keeps an idempotency key 24 h, past which a resumed call would be a new one.
    resolveWindowSeconds: integer(env, "PAYMENT_PROCESSOR_RESOLVE_WINDOW", 3600, 1, 23 * 3600),
    defaultCurrency: currency,
  });
}

// The payment processor's settings (PAYMENT_PROCESSOR and friends, DEFAULT_CURRENCY), read by
// lib/platform/config.ts beside the others: a bad value is a ConfigError naming the variable,
// and the key is never echoed (it is held as a Secret).
import { ConfigError, integer, url, type Env } from "./config-values.ts";
import { Secret } from "./redact.ts";

/** PAYMENT_PROCESSOR: none (the ledger alone) or a processor that speaks Stripe's API. */
export type ProcessorMode = "none" | "stripe";
const PROCESSOR_MODES: readonly ProcessorMode[] = ["none", "stripe"];

export interface ProcessorConfig {
  readonly mode: ProcessorMode;
  /** Where the processor's API is (Stripe's own by default; the simulator in dev and tests). */
  readonly url: string;
  /** Required with mode stripe; a Stripe secret or restricted key, test mode or live. */
  readonly key: Secret | undefined;
  /** The bound on one call to the processor; past it the outcome is unknown (a 504). */
  readonly timeoutMs: number;
  /** How long the completer tries to resolve a STARTED key before it parks it for an operator. */
  readonly resolveWindowSeconds: number;
  /** The currency of a charge whose request names none (ISO 4217, lower case). */
  readonly defaultCurrency: string;
}

const STRIPE_API_URL = "https://api.stripe.com";
// Stripe answers in well under a second; 10 s leaves room for its slow tail without letting a
// request wait much beyond what a client waits for an answer.
const DEFAULT_TIMEOUT_MS = 10_000;
const MAX_TIMEOUT_MS = 120_000;
// An hour of the completer's back-off (capped at a few minutes a try) resolves any outage of
// the processor short of a disaster, and leaves an operator most of the day the processor
// keeps its idempotency keys for.
const DEFAULT_RESOLVE_WINDOW_S = 3600;
// Stripe keeps an idempotency key for 24 h: past it a resumed call with the same key would be
// a new call. The window must end before, with an hour to spare for the operator.
const MAX_RESOLVE_WINDOW_S = 23 * 3600;
const CURRENCY = /^[a-z]{3}$/;
// What a Stripe key looks like: a prefix and visible ASCII, no spaces; its value is never shown.
const KEY_CHARS = /^[\x21-\x7e]{8,255}$/;

export function processorConfig(env: Env): ProcessorConfig {
  const rawMode = (env.PAYMENT_PROCESSOR ?? "").trim().toLowerCase() || "none";
  const mode = PROCESSOR_MODES.find((m) => m === rawMode);
  if (!mode) throw new ConfigError(`PAYMENT_PROCESSOR must be one of ${PROCESSOR_MODES.join(", ")}, got "${rawMode}"`);
  const rawKey = env.PAYMENT_PROCESSOR_KEY?.trim() || undefined;
  if (rawKey !== undefined && !KEY_CHARS.test(rawKey)) {
    throw new ConfigError(`PAYMENT_PROCESSOR_KEY must be 8 to 255 visible ASCII characters (length ${rawKey.length})`);
  }
  if (mode === "stripe" && rawKey === undefined) throw new ConfigError("PAYMENT_PROCESSOR_KEY is required with PAYMENT_PROCESSOR=stripe");
  const currency = (env.DEFAULT_CURRENCY ?? "").trim() || "usd";
  if (!CURRENCY.test(currency)) throw new ConfigError(`DEFAULT_CURRENCY must be an ISO 4217 code in lower case (usd, eur, brl), got "${currency}"`);
  return Object.freeze({
    mode,
    url: url(env, "PAYMENT_PROCESSOR_URL", STRIPE_API_URL, ["https:", "http:"]),
    key: rawKey === undefined ? undefined : new Secret(rawKey),
    timeoutMs: integer(env, "PAYMENT_PROCESSOR_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 100, MAX_TIMEOUT_MS),
    resolveWindowSeconds: integer(env, "PAYMENT_PROCESSOR_RESOLVE_WINDOW", DEFAULT_RESOLVE_WINDOW_S, 1, MAX_RESOLVE_WINDOW_S),
    defaultCurrency: currency,
  });
}

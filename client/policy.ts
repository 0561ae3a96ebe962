// The retry policy's pure parts: which answers are worth another try, how long to wait before
// it (Retry-After, else exponential back-off with full jitter), and the budget that keeps an
// outage from multiplying the load. No I/O and no runtime-specific API.

/**
 * Answers another try with the same key may turn into a success (SPEC, "The client"). 500 is
 * one: for a payment an unknown outcome is never final (the next try replays it or finishes it).
 */
const RETRIED_STATUSES: ReadonlySet<number> = new Set([409, 429, 500, 502, 503, 504]);

/** Whether an HTTP answer with this status is tried again with the same key and bytes. */
export function isRetriedStatus(status: number): boolean {
  return RETRIED_STATUSES.has(status);
}

/**
 * The server's own word on another try: the `Should-Retry` header ("true" or "false"), as
 * Stripe's `Stripe-Should-Retry`. It overrides the status of a non-2xx answer either way;
 * absent or unreadable, the status decides. Our API does not send it today (docs/client.md).
 */
export function shouldRetry(status: number, hint: string | null): boolean {
  if (status >= 200 && status <= 299) return false;
  const said = hint?.trim().toLowerCase();
  if (said === "true") return true;
  if (said === "false") return false;
  return isRetriedStatus(status);
}

/**
 * The wait a `Retry-After` value asks for, in ms: delay-seconds or an HTTP date (RFC 9110
 * §10.2.3). Undefined when absent or unreadable, so the back-off applies instead; a date in
 * the past is 0.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (!/[a-z]/i.test(text) || Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

export interface BackoffOptions {
  /** The ceiling of the first retry's wait. */
  readonly baseMs: number;
  /** No wait is ever longer. */
  readonly maxMs: number;
}

/**
 * "Full jitter" (AWS Architecture Blog, Exponential Backoff and Jitter): uniform in
 * [0, min(max, base · 2^(retry − 1))], so clients that failed together do not retry together.
 * `retry` counts from 1; `random` is in [0, 1).
 */
export function backoffMs(retry: number, options: BackoffOptions, random: number): number {
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** Math.max(0, retry - 1));
  return Math.floor(random * ceiling);
}

export interface RetryBudgetOptions {
  /** Tokens at the start, and the most the bucket holds. */
  readonly burst: number;
  /** Tokens added per second whatever happens: the floor that lets a failing client still probe. */
  readonly perSecond: number;
  /** Tokens each success adds (a final answer from the server): the server is taking requests. */
  readonly perSuccess: number;
}

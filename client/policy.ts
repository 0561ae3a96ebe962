// The retry policy's pure parts: which answers are worth another try, how long to wait before
// it (Retry-After, else exponential back-off with full jitter), and the budget that keeps an
// outage from multiplying the load. No I/O and no runtime-specific API.

/** Answers another try with the same key may turn into a success (SPEC, "The client"). */
const RETRIED_STATUSES: ReadonlySet<number> = new Set([409, 429, 502, 503, 504]);

/** Whether an HTTP answer with this status is tried again with the same key and bytes. */
export function isRetriedStatus(status: number): boolean {
  return RETRIED_STATUSES.has(status);
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
  /** Retries that may be spent at once (and the bucket's size). */
  readonly burst: number;
  /** Tokens added per second whatever the traffic: a floor for a quiet client. */
  readonly perSecond: number;
  /** Tokens each first try adds: retries stay a share of the traffic during an outage. */
  readonly ratio: number;
}

/**
 * A token bucket shared by every call of one client: a first try deposits `ratio`, a retry
 * withdraws 1, time adds `perSecond`; a retry with no token left is not sent. So over any run,
 * retries ≤ burst + perSecond · seconds + ratio · first tries (test/client-policy.test.ts).
 */
export class RetryBudget {
  #tokens: number;
  #at: number;
  #granted = 0;
  #refused = 0;

  readonly options: RetryBudgetOptions;
  readonly #now: () => number;

  // Plain fields, no parameter properties: the module stays erasable TypeScript (Node's type stripping).
  constructor(options: RetryBudgetOptions, now: () => number = () => Date.now()) {
    this.options = options;
    this.#now = now;
    this.#tokens = options.burst;
    this.#at = now();
  }

  /** A first try: its deposit. */
  deposit(): void {
    this.#refill();
    this.#tokens = Math.min(this.options.burst, this.#tokens + this.options.ratio);
  }

  /** Takes a token for a retry; false when there is none (the retry is not sent). */
  withdraw(): boolean {
    this.#refill();
    if (this.#tokens < 1) {
      this.#refused += 1;
      return false;
    }
    this.#tokens -= 1;
    this.#granted += 1;
    return true;
  }

  /** Retries granted and refused so far. */
  get stats(): { granted: number; refused: number } {
    return { granted: this.#granted, refused: this.#refused };
  }

  #refill(): void {
    const now = this.#now();
    this.#tokens = Math.min(this.options.burst, this.#tokens + ((now - this.#at) / 1000) * this.options.perSecond);
    this.#at = now;
  }
}

// The retry budget: a token bucket shared by every call of one client. A retry takes a token;
// a success (a final answer from the server below 500) adds `perSuccess`, time adds `perSecond`. So
// retries follow what succeeds: a lossy network that still delivers most answers earns its
// retries back at once, while a server answering 503, dropping every connection or refusing
// them earns nothing and gets only the floor. A retry with no token waits for one, in turn,
// until its call's deadline; it is never refused outright, so no intent fails early for lack
// of a token. Over any stretch: retries ≤ burst + perSecond · seconds + perSuccess · successes.
import type { RetryBudgetOptions } from "./policy.ts";

// setTimeout's largest delay (a 32-bit signed int of ms); a longer one would fire at once.
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  readonly grant: (granted: boolean) => void;
}

export class RetryBudget {
  #tokens: number;
  #at: number;
  #granted = 0;
  #refused = 0;
  #successes = 0;
  #waited = 0;
  readonly #waiters: Waiter[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;

  readonly options: RetryBudgetOptions;
  readonly #now: () => number;

  // Plain fields, no parameter properties: the module stays erasable TypeScript (Node's type stripping).
  constructor(options: RetryBudgetOptions, now: () => number = () => Date.now()) {
    for (const name of ["burst", "perSecond", "perSuccess"] as const) {
      // A bug in the caller (e.g. the options of an older client, with `ratio`): a NaN would
      // hold every retry until its deadline without a word.
      const value: unknown = options[name];
      if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
        throw new TypeError(`ChargesClient: retryBudget.${name} must be a finite number ≥ 0, got ${String(value)}`);
      }
    }
    this.options = Object.freeze({ burst: options.burst, perSecond: options.perSecond, perSuccess: options.perSuccess });
    this.#now = now;
    this.#tokens = options.burst;
    this.#at = now();
  }

  /** A final answer came from the server: its deposit, handed at once to the first waiting retry. */
  succeeded(): void {
    this.#successes += 1;
    this.#refill();
    this.#tokens += this.options.perSuccess;
    this.#serve();
  }

  /**
   * A token for a retry: at once when there is one and no retry waits before this one, else
   * when one comes. False when `deadline` (epoch ms) passes or `signal` aborts first.
   */
  acquire(deadline: number, signal?: AbortSignal): Promise<boolean> {
    this.#refill();
    if (this.#waiters.length === 0 && this.#tokens >= 1) return Promise.resolve(this.#take());
    if (signal?.aborted || deadline <= this.#now()) {
      this.#refused += 1;
      return Promise.resolve(false);
    }
    return new Promise((resolve) => {
      const end = (granted: boolean): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", abandon);
        if (!granted) this.#refused += 1;
        resolve(granted);
      };
      const waiter: Waiter = { grant: end };
      const abandon = (): void => {
        const at = this.#waiters.indexOf(waiter);
        if (at < 0) return;
        this.#waiters.splice(at, 1);
        end(false);
      };
      const timer = Number.isFinite(deadline) ? setTimeout(abandon, Math.min(MAX_TIMER_MS, Math.max(0, deadline - this.#now()))) : undefined;
      signal?.addEventListener("abort", abandon, { once: true });
      this.#waiters.push(waiter);
      this.#schedule();
    });
  }

  /**
   * Retries granted (`waited` of them after waiting for a token), retries whose deadline or
   * signal came while they waited (`refused`), successes counted, and retries waiting now.
   */
  get stats(): { granted: number; waited: number; refused: number; successes: number; waiting: number } {
    return { granted: this.#granted, waited: this.#waited, refused: this.#refused, successes: this.#successes, waiting: this.#waiters.length };
  }

  #take(): boolean {
    this.#tokens -= 1;
    this.#granted += 1;
    return true;
  }

  /** Hands whole tokens to the waiting retries, first come first served; what is left is capped. */
  #serve(): void {
    while (this.#waiters.length > 0 && this.#tokens >= 1) {
      this.#take();
      this.#waited += 1;
      this.#waiters.shift()!.grant(true);
    }
    this.#cap();
    this.#schedule();
  }

  // The cap applies to what no retry waits for: a deposit made while retries wait goes to them
  // whole, even past `burst` (with burst 0, a success still pays for a waiting retry).
  #cap(): void {
    if (this.#waiters.length === 0) this.#tokens = Math.min(this.options.burst, this.#tokens);
  }

  /** While retries wait, one timer for the moment the floor makes the next whole token. */
  #schedule(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#waiters.length === 0 || this.options.perSecond <= 0) return;
    const ms = Math.ceil(((1 - this.#tokens) / this.options.perSecond) * 1000);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#refill();
      this.#serve();
    }, Math.max(1, ms));
  }

  #refill(): void {
    const now = this.#now();
    this.#tokens += ((now - this.#at) / 1000) * this.options.perSecond;
    this.#at = now;
    this.#cap();
  }
}

// A bound on the wait for a pool connection, and a per-request deadline: postgres.js has no acquire
// timeout and cannot take back a query handed to it (a 503 for one that commits later would break
// "a charge is committed only behind a 201"), so work that gets no slot in time is refused unsent.

/** Error codes of the two refusals; isUnavailable (db.ts) counts both as "try again later". */
export const POOL_WAIT_TIMEOUT = "POOL_WAIT_TIMEOUT";
export const REQUEST_DEADLINE = "REQUEST_DEADLINE";

/** Nothing was sent: no slot freed within the pool wait, or the request's deadline was too near. */
export class TimeBoundError extends Error {
  override name = "TimeBoundError";
  constructor(readonly code: typeof POOL_WAIT_TIMEOUT | typeof REQUEST_DEADLINE, message: string) {
    super(message);
  }
}

// `size`: the pool's max. Work starts only while a statement can still end within the request's
// whole budget, so none is abandoned mid-commit.
export interface PoolGateOptions {
  readonly size: number;
  readonly waitMs: number;
  readonly requestTimeoutMs: number;
  readonly statementTimeoutMs: number;
}

/** One request's clock: `run` holds a slot for `work`, or throws a TimeBoundError with nothing sent. */
export interface Deadline {
  /** A performance.now() time. */
  readonly endsAt: number;
  run<T>(work: (endsAt: number) => Promise<T>): Promise<T>;
}

export type PoolGate = ReturnType<typeof createPoolGate>;

/** For callers without bounds (tools, tests of the service alone): runs work at once. */
export const UNBOUNDED: Deadline = { endsAt: Number.POSITIVE_INFINITY, run: (work) => work(Number.POSITIVE_INFINITY) };

// How long a cancelled statement may take to answer; past it only a dead connection is left, and a
// retry with the same key finds the outcome (the statement is atomic and keyed).
const CANCEL_GRACE_MS = 2_000;

/** What settleBy() needs of a postgres.js query. */
export interface Cancellable<T> extends PromiseLike<T> {
  cancel(): unknown;
}

/** `query`, cancelled at `endsAt` (57014) even mid-reconnect; TimeBoundError if the cancel is unanswered. */
export function settleBy<T>(query: Cancellable<T>, endsAt: number): Promise<T> {
  const ms = endsAt - performance.now();
  if (ms === Number.POSITIVE_INFINITY) return Promise.resolve(query);
  // One timer per statement on the hot path; the grace's only once the cancel went out.
  return new Promise<T>((resolve, reject) => {
    let grace: ReturnType<typeof setTimeout> | undefined;
    const cancel = setTimeout(() => {
      void Promise.resolve(query.cancel()).catch(() => {});
      grace = setTimeout(() => reject(new TimeBoundError(REQUEST_DEADLINE, "the database did not answer within the request's deadline")), CANCEL_GRACE_MS);
    }, Math.max(0, ms));
    const settle = (): void => {
      clearTimeout(cancel);
      clearTimeout(grace);
    };
    query.then(
      (value) => (settle(), resolve(value)),
      (error: unknown) => (settle(), reject(error)),
    );
  });
}

export function createPoolGate(options: PoolGateOptions) {
  const { size, waitMs, requestTimeoutMs, statementTimeoutMs } = options;
  let held = 0;
  // A Set keeps arrival order and lets a waiter that timed out leave from the middle.
  const waiters = new Set<() => void>();

  const acquire = (left: number): Promise<void> => {
    const refusal = (): TimeBoundError =>
      waitMs <= left
        ? new TimeBoundError(POOL_WAIT_TIMEOUT, `no database connection freed within ${waitMs} ms`)
        : new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed while waiting for a database connection");
    const budgetMs = Math.min(waitMs, left);
    if (budgetMs <= 0) return Promise.reject(refusal());
    return new Promise((resolve, reject) => {
      const grant = (): void => (clearTimeout(timer), resolve());
      const timer = setTimeout(() => (waiters.delete(grant), reject(refusal())), budgetMs);
      waiters.add(grant);
    });
  };
  const release = (): void => {
    const next = waiters.values().next().value;
    if (next === undefined) return void held--;
    waiters.delete(next);
    next(); // the slot passes straight to the next waiter
  };
  const run = async <T>(startBy: number, work: (endsAt: number) => Promise<T>): Promise<T> => {
    const left = startBy - performance.now();
    if (left < 0) throw new TimeBoundError(REQUEST_DEADLINE, "the request's deadline left no time for another statement");
    // A free slot with nobody ahead is taken at once: the common case waits for nothing.
    if (held < size && waiters.size === 0) held++;
    else await acquire(left);
    try {
      return await work(startBy + statementTimeoutMs);
    } finally {
      release();
    }
  };
  return {
    /** Starts one request's clock. */
    deadline(): Deadline {
      const startBy = performance.now() + requestTimeoutMs - statementTimeoutMs;
      return { endsAt: startBy + statementTimeoutMs, run: (work) => run(startBy, work) };
    },
    get inUse(): number {
      return held;
    },
    get waiting(): number {
      return waiters.size;
    },
  };
}

// A bound on the wait for a pool connection, and a per-request deadline, in front of
// postgres.js.
//
// postgres.js has no acquire timeout. With every connection busy it pipelines a query onto
// a busy connection (sent at once, run whenever the statement ahead of it ends) and queues
// the rest in memory without bound. A query handed to it cannot be taken back: answering 503
// for it and letting it commit later would break "a charge is committed only behind a 201".
// So the gate holds requests BEFORE postgres.js sees them: at most `size` (the pool's max)
// units of work are handed over at once, so each finds a connection of its own, and a
// request that cannot get a slot in time is refused with nothing sent. Work that was handed
// over is waited for: statement_timeout and lock_timeout bound it on the server, and
// settleBy() cancels at the request's deadline a statement the client never got to send
// (postgres.js holds statements while it reconnects, with a back-off of up to 20 s per try
// when the server refuses connections: 53300 at max_connections).

/** Error codes of the two refusals; isUnavailable (db.ts) counts both as "try again later". */
export const POOL_WAIT_TIMEOUT = "POOL_WAIT_TIMEOUT";
export const REQUEST_DEADLINE = "REQUEST_DEADLINE";

/** Nothing was sent: no slot freed within the pool wait, or the request's deadline was too near. */
export class TimeBoundError extends Error {
  override name = "TimeBoundError";
  constructor(
    readonly code: typeof POOL_WAIT_TIMEOUT | typeof REQUEST_DEADLINE,
    message: string,
  ) {
    super(message);
  }
}

export interface PoolGateOptions {
  /** Slots: the pool's max, so that every unit of work handed over has a connection. */
  readonly size: number;
  /** Longest wait for a slot. */
  readonly waitMs: number;
  /** A request's whole budget, from deadline() to its answer. */
  readonly requestTimeoutMs: number;
  /**
   * The server's bound on one statement. Work starts only while it can still end within the
   * request's budget, so the deadline never has to abandon a statement that might commit.
   */
  readonly statementTimeoutMs: number;
}

export interface Deadline {
  /** The request's end (a performance.now() time), as run() hands it to its work. */
  readonly endsAt: number;
  /**
   * Runs `work` holding one slot; a TimeBoundError, with nothing sent, when none frees in time.
   * `work` gets the request's end (a performance.now() time) for settleBy().
   */
  run<T>(work: (endsAt: number) => Promise<T>): Promise<T>;
}

export interface PoolGate {
  /** Starts one request's clock. */
  deadline(): Deadline;
  /** Slots held, and requests waiting for one. */
  readonly inUse: number;
  readonly waiting: number;
}

/** For callers without bounds (tools, tests of the service alone): runs work at once. */
export const UNBOUNDED: Deadline = { endsAt: Number.POSITIVE_INFINITY, run: (work) => work(Number.POSITIVE_INFINITY) };

// After the cancel at the deadline, how long a statement may take to answer it: one the
// client never sent is rejected at once, and a server answers a cancel within a round trip.
// Past this only a connection that stopped answering is left, and the request is answered
// without its statement's outcome (a retry with the same key finds what, if anything,
// committed: the statement is atomic and keyed).
export const CANCEL_GRACE_MS = 2_000;

/** What settleBy() needs of a postgres.js query. */
export interface Cancellable<T> extends PromiseLike<T> {
  cancel(): unknown;
}

/**
 * `query`'s result, cancelled at `endsAt` (performance.now() time) if it has not settled:
 * a statement postgres.js has not sent is dropped with nothing sent, one the server runs is
 * cancelled there and rolled back (57014 either way, a time bound), and one that finished
 * first keeps its result. A TimeBoundError if even the cancel goes unanswered.
 */
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

interface Waiter {
  readonly grant: () => void;
}

export function createPoolGate(options: PoolGateOptions): PoolGate {
  return new SlotGate(options);
}

class SlotGate implements PoolGate {
  private held = 0;
  // A Set keeps arrival order and lets a waiter that timed out leave from the middle.
  private readonly waiters = new Set<Waiter>();

  constructor(private readonly options: PoolGateOptions) {}

  get inUse(): number {
    return this.held;
  }

  get waiting(): number {
    return this.waiters.size;
  }

  deadline(): Deadline {
    const startBy = performance.now() + this.options.requestTimeoutMs - this.options.statementTimeoutMs;
    return { endsAt: startBy + this.options.statementTimeoutMs, run: (work) => this.run(startBy, work) };
  }

  private async run<T>(startBy: number, work: (endsAt: number) => Promise<T>): Promise<T> {
    const left = startBy - performance.now();
    if (left < 0) throw new TimeBoundError(REQUEST_DEADLINE, "the request's deadline left no time for another statement");
    if (!this.tryAcquire()) await this.acquire(left);
    try {
      return await work(startBy + this.options.statementTimeoutMs);
    } finally {
      this.release();
    }
  }

  // A free slot with nobody ahead: taken at once, so the common case waits for nothing.
  private tryAcquire(): boolean {
    if (this.held >= this.options.size || this.waiters.size > 0) return false;
    this.held++;
    return true;
  }

  /** Waits for a slot until the pool wait or the request's deadline, whichever is nearer. */
  private acquire(left: number): Promise<void> {
    const { waitMs } = this.options;
    const refusal = (): TimeBoundError =>
      waitMs <= left
        ? new TimeBoundError(POOL_WAIT_TIMEOUT, `no database connection freed within ${waitMs} ms`)
        : new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed while waiting for a database connection");
    const budgetMs = Math.min(waitMs, left);
    if (budgetMs <= 0) return Promise.reject(refusal());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(refusal());
      }, budgetMs);
      const waiter: Waiter = {
        grant() {
          clearTimeout(timer);
          resolve();
        },
      };
      this.waiters.add(waiter);
    });
  }

  private release(): void {
    const next = this.waiters.values().next().value;
    if (next === undefined) {
      this.held--;
      return;
    }
    this.waiters.delete(next);
    next.grant(); // the slot passes straight to the next waiter
  }
}

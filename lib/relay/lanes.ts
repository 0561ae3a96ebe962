// A drain: lanes claiming and publishing batches until a claim from the top of the pending
// index comes back short. Every full claim starts another lane (one awaits its PUBACKs while
// the next claims), up to the lane limit. Claims start small and double while they come back
// full, up to OUTBOX_BATCH_SIZE and what the broker answers in good time; a short one halves.
import type { BatchRun } from "./batch.ts";

// Rows claimed and not yet settled over all lanes: past this, more lanes only make every claim
// skip more locked rows, and Postgres's CPU per row grows (bench/relay-drain.ts finds the knee).
const MAX_CLAIMED_ROWS = 200;
// At least three: a batch's database phases take about as long as publishing another's rows,
// so with two the publisher would wait. At most eight: each lane holds a database connection.
const MIN_LANES = 3;
const MAX_LANES = 8;
// The first claim of a drain, and the smallest: published one row at a time, ten keep that short.
const MIN_CLAIM = 10;

/** Concurrent batches for a claim cap (the relay's pool needs one connection per lane). */
export function laneCount(batchSize: number): number {
  return Math.min(MAX_LANES, Math.max(MIN_LANES, Math.floor(MAX_CLAIMED_ROWS / batchSize)));
}

// Each row must be answered within the publish timeout from its claim, behind the rows the
// other lanes handed over first: against a slow broker a large claim would time out and be
// delivered twice. So all lanes hold what the broker answers in this share of the timeout.
const TIMEOUT_SHARE_FOR_CLAIMED_ROWS = 1 / 4;

/** The size of the next claim, within [min, cap] and never past what the broker answers in good time. */
export type ClaimSizer = ReturnType<typeof createClaimSizer>;

export function createClaimSizer(cap: number, publishTimeoutMs: number, lanes: number, min: number = Math.min(MIN_CLAIM, cap)) {
  let size = min;
  // No growth before a batch has shown the broker's pace.
  let budget = min;
  return {
    next: (): number => size,
    /** A claim of `limit` rows came back with `claimed`. */
    record(limit: number, claimed: number): void {
      size = claimed < limit ? Math.max(min, Math.floor(size / 2)) : Math.min(cap, budget, Math.max(size, limit * 2));
    },
    /** A batch of `rows` was all answered `ms` after its claim. */
    answered(rows: number, ms: number): void {
      if (rows === 0) return;
      // Includes the wait behind the other lanes' rows: understates the pace, errs small.
      const pace = rows / Math.max(ms, 1);
      budget = Math.max(min, Math.floor((pace * publishTimeoutMs * TIMEOUT_SHARE_FOR_CLAIMED_ROWS) / lanes));
      size = Math.min(size, budget);
    },
    /** About `rows` are due at once (a gather): the next claim asks for them all. */
    expect(rows: number): void {
      size = Math.min(cap, budget, Math.max(size, rows));
    },
  };
}

interface DrainOptions {
  readonly maxLanes: number;
  /** Kept by the relay across drains. */
  readonly sizer: ClaimSizer;
  /** Aborted when the relay stops: no lane starts another batch. */
  readonly stop: AbortSignal;
  readonly startBatch: (limit: number) => BatchRun;
}

/** Runs lanes until a claim comes back short: the rows claimed, or the first lane's error once all ended. */
export function drain(options: DrainOptions): Promise<number> {
  const { maxLanes, sizer, stop } = options;
  return new Promise((resolve, reject) => {
    let lanes = 0;
    let rows = 0;
    let failure: unknown;
    const going = (): boolean => failure === undefined && !stop.aborted;

    const lane = async (): Promise<void> => {
      while (going()) {
        const limit = sizer.next();
        const run = options.startBatch(limit);
        const { rows: claimed, full } = await run.claimed;
        rows += claimed;
        // A full window grows the next claim (rows in it that were no heads are no reason to
        // claim less) and starts another lane: more may be due past it.
        sizer.record(limit, full ? limit : claimed);
        if (full && lanes < maxLanes && going()) spawn();
        const result = await run.result;
        sizer.answered(result.claimed, result.answeredMs);
        // Short from the top: nothing due is left. From the frontier: the next claim looks from the top.
        if (!result.full && result.fromTop) return;
      }
    };
    const spawn = (): void => {
      lanes += 1;
      lane()
        .catch((error: unknown) => void (failure ??= error))
        .finally(() => {
          lanes -= 1;
          if (lanes > 0) return;
          if (failure === undefined) resolve(rows);
          else reject(failure);
        });
    };
    spawn();
  });
}

// A drain: lanes claiming and publishing batches until a claim from the top of the pending
// index comes back short. It starts with one lane; every full claim starts another, up to the
// lane limit, so a single row costs one transaction while a backlog gets several batches in
// flight at once, each in its own transaction (one lane awaits its PUBACKs while the next
// claims).
//
// Claims are adaptive: a drain starts with small claims and doubles the claim while claims
// come back full, up to the cap (OUTBOX_BATCH_SIZE) and to what the broker answers in good
// time; a short claim halves it. A nearly empty outbox is served by small claims published
// one at a time (latency, see batch.ts), a backlog by large ones (fewer transactions, claims
// and marks per row).
import type { BatchRun } from "./batch.ts";

// Rows claimed and not yet settled over all lanes: past this, more lanes only make every claim
// skip more locked rows, and Postgres's CPU per row grows (bench/relay-drain.ts finds the knee).
const MAX_CLAIMED_ROWS = 200;
// At least three: a batch's database phases (mark, commit, the next claim) take about as long
// as publishing the other batch's rows, so with two lanes the publisher would wait for rows; a
// third keeps rows waiting for it. At most eight, as each lane holds a database connection for
// the length of its batch.
const MIN_LANES = 3;
const MAX_LANES = 8;
// The first claim of a drain, and the smallest. A short claim is published one row at a
// time, a local round trip (~0.1 ms) per row: ten keep that under about a millisecond.
export const MIN_CLAIM = 10;

/** Concurrent batches for a claim cap (the relay's pool needs one connection per lane). */
export function laneCount(batchSize: number): number {
  return Math.min(MAX_LANES, Math.max(MIN_LANES, Math.floor(MAX_CLAIMED_ROWS / batchSize)));
}

/**
 * The size of the next claim: doubles after a full claim, halves after a short one, within
 * [min, cap], and never past what the broker is seen to acknowledge in good time.
 */
export interface ClaimSizer {
  next(): number;
  /** A claim of `limit` rows came back with `claimed`. */
  record(limit: number, claimed: number): void;
  /** A batch of `rows` was all answered `ms` after its claim (BatchResult.answeredMs). */
  answered(rows: number, ms: number): void;
  /** About `rows` are due at once (a gathered stream, gather.ts): the next claim asks for them all. */
  expect(rows: number): void;
}

// Every row of a batch must be answered within the publish timeout, counted from its claim,
// and it waits behind the rows the other lanes handed over first: against a slow broker
// (remote, or with a small Receive Maximum) a large claim would time out and be delivered a
// second time. So the rows all lanes hold are kept to what the broker answers in this share
// of the timeout, at the pace the last batch saw.
const TIMEOUT_SHARE_FOR_CLAIMED_ROWS = 1 / 4;

export function createClaimSizer(cap: number, publishTimeoutMs: number, lanes: number, min: number = Math.min(MIN_CLAIM, cap)): ClaimSizer {
  let size = min;
  // No growth before a batch has shown the broker's pace.
  let budget = min;
  return {
    next: () => size,
    record(limit, claimed) {
      size = claimed < limit ? Math.max(min, Math.floor(size / 2)) : Math.min(cap, budget, Math.max(size, limit * 2));
    },
    answered(rows, ms) {
      if (rows === 0) return;
      // Rows per ms. The batch's time includes its wait behind the other lanes' rows, so this
      // understates the broker's pace: the budget errs on the small side.
      const pace = rows / Math.max(ms, 1);
      budget = Math.max(min, Math.floor((pace * publishTimeoutMs * TIMEOUT_SHARE_FOR_CLAIMED_ROWS) / lanes));
      size = Math.min(size, budget);
    },
    expect(rows) {
      size = Math.min(cap, budget, Math.max(size, rows));
    },
  };
}

export interface DrainOptions {
  readonly maxLanes: number;
  /** The claim sizes; kept by the relay across drains. */
  readonly sizer: ClaimSizer;
  /** Aborted when the relay stops: no lane starts another batch. */
  readonly stop: AbortSignal;
  /** Starts one batch claiming up to `limit` rows. */
  readonly startBatch: (limit: number) => BatchRun;
}

/**
 * Runs lanes until a claim comes back short; resolves with the rows claimed, or rejects with
 * the first lane's error once all have ended.
 */
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
        // A full window grows the next: its rows that were not heads (their aggregate's
        // earlier event in flight) are no reason to claim less.
        sizer.record(limit, full ? limit : claimed);
        // A full window means more may be due past it: another lane starts while this one
        // awaits its PUBACKs, and claims from where this window ended.
        if (full && lanes < maxLanes && going()) spawn();
        const result = await run.result;
        sizer.answered(result.claimed, result.answeredMs);
        // Short from the top of the pending index: nothing due is left. Short from the
        // frontier: the next claim starts at the top (claim-lock.ts) and looks again.
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

// A drain: lanes claiming and publishing batches until a claim comes back short. It starts
// with one lane; every full claim starts another, up to the lane limit, so a single row costs
// one transaction while a backlog gets several batches in flight at once, each in its own
// transaction (one lane awaits its PUBACKs while the next claims).
import type { BatchRun } from "./batch.ts";

// Rows claimed and not yet settled over all lanes. Measured with bench/relay-drain.ts on 2
// cores: past about 200, more lanes only make every claim skip more locked rows, Postgres's
// CPU per row grows and the drain slows down.
const MAX_CLAIMED_ROWS = 200;
// At least two, so one batch's claim overlaps another's wait for PUBACKs; at most eight, as
// each lane holds a database connection for the length of its batch.
const MIN_LANES = 2;
const MAX_LANES = 8;

/** Concurrent batches for a batch size (the relay's pool needs one connection per lane). */
export function laneCount(batchSize: number): number {
  return Math.min(MAX_LANES, Math.max(MIN_LANES, Math.floor(MAX_CLAIMED_ROWS / batchSize)));
}

export interface DrainOptions {
  readonly batchSize: number;
  readonly maxLanes: number;
  /** Aborted when the relay stops: no lane starts another batch. */
  readonly stop: AbortSignal;
  /** Starts one batch. */
  readonly startBatch: () => BatchRun;
}

/** Runs lanes until a claim comes back short; rejects with the first lane's error once all have ended. */
export function drain(options: DrainOptions): Promise<void> {
  const { batchSize, maxLanes, stop } = options;
  return new Promise((resolve, reject) => {
    let lanes = 0;
    let failure: unknown;
    const going = (): boolean => failure === undefined && !stop.aborted;

    const lane = async (): Promise<void> => {
      while (going()) {
        const run = options.startBatch();
        // A full claim means more may be due: another lane starts while this one awaits its PUBACKs.
        if ((await run.claimed) === batchSize && lanes < maxLanes && going()) spawn();
        if ((await run.result).claimed < batchSize) return;
      }
    };
    const spawn = (): void => {
      lanes += 1;
      lane()
        .catch((error: unknown) => void (failure ??= error))
        .finally(() => {
          lanes -= 1;
          if (lanes > 0) return;
          if (failure === undefined) resolve();
          else reject(failure);
        });
    };
    spawn();
  });
}

// A drain: lanes claiming and publishing until a claim from the top comes back short. A full claim
// starts another lane (one awaits its PUBACKs while the next claims) and doubles the next claim.
import type { BatchRun } from "./batch.ts";

// Rows in flight over all lanes: past this, more lanes only make claims skip more locked rows.
const MAX_CLAIMED_ROWS = 200;
// With two lanes the publisher would wait out a batch's database phases; each lane holds a connection.
const MIN_LANES = 3;
const MAX_LANES = 8;
// The first claim of a drain, and the smallest.
const MIN_CLAIM = 10;

export function laneCount(batchSize: number): number {
  return Math.min(MAX_LANES, Math.max(MIN_LANES, Math.floor(MAX_CLAIMED_ROWS / batchSize)));
}

// Against a slow broker a large claim would time out behind the other lanes' rows and be
// delivered twice: all lanes hold what the broker answers in this share of the timeout.
const TIMEOUT_SHARE_FOR_CLAIMED_ROWS = 1 / 4;

export type ClaimSizer = ReturnType<typeof createClaimSizer>;

export function createClaimSizer(cap: number, publishTimeoutMs: number, lanes: number, min: number = Math.min(MIN_CLAIM, cap)) {
  let size = min;
  // No growth before a batch has shown the broker's pace.
  let budget = min;
  return {
    next: (): number => size,
    record(limit: number, claimed: number): void {
      size = claimed < limit ? Math.max(min, Math.floor(size / 2)) : Math.min(cap, budget, Math.max(size, limit * 2));
    },
    answered(rows: number, ms: number): void {
      if (rows === 0) return;
      // Includes the wait behind the other lanes' rows: understates the pace, errs small.
      const pace = rows / Math.max(ms, 1);
      budget = Math.max(min, Math.floor((pace * publishTimeoutMs * TIMEOUT_SHARE_FOR_CLAIMED_ROWS) / lanes));
      size = Math.min(size, budget);
    },
    expect(rows: number): void {
      size = Math.min(cap, budget, Math.max(size, rows));
    },
  };
}

interface DrainOptions {
  readonly maxLanes: number;
  readonly sizer: ClaimSizer;
  readonly stop: AbortSignal;
  readonly startBatch: (limit: number) => BatchRun;
}

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
        // Rows of a full window that were no heads are no reason to claim less.
        sizer.record(limit, full ? limit : claimed);
        if (full && lanes < maxLanes && going()) spawn();
        const result = await run.result;
        sizer.answered(result.claimed, result.answeredMs);
        // Short from the frontier: the next claim looks from the top.
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

// The gap sweep: now and then fills old gaps from the API (gap-fill.ts), then processes held
// events no arriving event will release: those whose turn a crash left unreleased, and those
// whose gap outlasted the gap timeout. It also counts held events for the gauge. Every member of
// a share group runs it; the aggregate's row lock keeps two from releasing the same event.
import { describeDbError, type Sql } from "../platform/db.ts";
import { every, type Every } from "../platform/every.ts";
import type { SubscriberCounts } from "./counts.ts";
import type { GapFiller } from "./gap-fill.ts";
import type { Releaser } from "./release.ts";
import { Closing } from "./retry.ts";
import { countHeld, dueAggregates } from "./sequence-sql.ts";

// A held event goes at most this long after its timeout or its unreleased turn; a run is two
// reads of the consumer's few held events (an index), so once a second costs next to nothing.
const GAP_SWEEP_INTERVAL_MS = 1000;
// After failed runs (the database away) the pause doubles up to this, so an outage is not
// logged every second.
const GAP_SWEEP_MAX_PAUSE_MS = 30_000;
const GAP_SWEEP_BATCH = 100;

export interface GapSweepOptions {
  readonly sql: Sql;
  readonly consumer: string;
  readonly timeoutMs: number;
  readonly releaser: Releaser;
  readonly counts: SubscriberCounts;
  readonly filler?: GapFiller;
  readonly onError?: (description: string) => void;
}

/** Runs at once, then every interval until stop(), which lets the release in hand finish. */
export function startGapSweep(options: GapSweepOptions): Every {
  let failures = 0;
  return every({
    delayMs: () => Math.min(GAP_SWEEP_MAX_PAUSE_MS, GAP_SWEEP_INTERVAL_MS * 2 ** failures),
    runAtOnce: true,
    job: async (signal) => {
      // Filled first: a gap the API fills is never skipped by the release below.
      await options.filler?.run(signal);
      const due = await dueAggregates(options.sql, options.consumer, options.timeoutMs, GAP_SWEEP_BATCH);
      for (const place of due) {
        if (signal.aborted) return;
        await options.releaser.release(place);
      }
      options.counts.setHeldNow(await countHeld(options.sql, options.consumer));
      failures = 0;
    },
    onError: (error) => {
      if (error instanceof Closing) return;
      failures += 1;
      options.onError?.(`gap sweep failed (next in ${Math.min(GAP_SWEEP_MAX_PAUSE_MS, GAP_SWEEP_INTERVAL_MS * 2 ** failures)} ms): ${describeDbError(error)}`);
    },
  });
}

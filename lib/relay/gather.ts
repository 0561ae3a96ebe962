// Gathering a busy live stream into fewer claims. A claim's fixed cost (a transaction, its
// wake-ups, a log line) falls on few rows when every NOTIFY of a stream of thousands of events
// a second starts a claim. Past GATHER_MIN_RATE_PER_S the next drain starts only once the
// gather time has passed since the last one began, and takes what came meanwhile in one claim.
// Below it (the latency case) nothing waits.
import { createMovingRate } from "../platform/moving-rate.ts";
import { IN_TURN_MAX } from "./batch.ts";

// Twice a rate whose claims of one row each still cost little, so that a burst at that rate
// does not read as a stream. Below the API's own busy rate (lib/platform/wakeup.ts): an API
// sharing its cores with the relay may never reach that, and would lose CPU to tiny claims.
export const GATHER_MIN_RATE_PER_S = 400;
// The rows a claim need not exceed: past them the claim's fixed cost is small beside its rows'.
const GATHER_ROWS = 200;
// The rate's time constant: rows that committed together must not read as a busy stream, nor a
// lull end one at once.
const RATE_WINDOW_MS = 100;
// The claim after a gather asks for this much more than expected: a stream that sped up still
// comes in one claim (a short claim ends the drain).
const CLAIM_MARGIN = 1.5;

export type Gather = ReturnType<typeof createGather>;

/** `maxMs` (RELAY_GATHER_MS): the longest an event waits to be gathered; 0 gathers nothing. */
export function createGather(maxMs: number) {
  // Rows claimed over the time they took to come, from one drain's start to the next's.
  const rate = createMovingRate(RATE_WINDOW_MS);
  let began = 0;
  return {
    /** A drain that began at `at` claimed `claimed`: when the next may start (`at` when at once). */
    drained(at: number, claimed: number): number {
      rate.add(claimed, at);
      began = at;
      const perMs = rate.perMs(at);
      if (maxMs <= 0 || perMs * 1000 < GATHER_MIN_RATE_PER_S) return at;
      return at + Math.min(maxMs, GATHER_ROWS / perMs);
    },
    /** The size of the claim for the rows due by `at`, with a margin. */
    expected(at: number): number {
      // At the rate the last drain left (the time since is the gather, not a lull), and never
      // so few rows that the claim would be published one row at a time (batch.ts).
      return Math.max(IN_TURN_MAX + 1, Math.ceil(rate.perMs(began) * Math.max(0, at - began) * CLAIM_MARGIN));
    },
  };
}

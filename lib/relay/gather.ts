// Gathering a busy live stream into fewer claims. A claim costs the relay and Postgres about
// the same whatever its rows: a transaction (BEGIN, the claim, the mark and COMMIT), a wake-up
// per round trip, a log line. At a live rate of thousands of events a second a notify wakes
// the relay every few milliseconds and each claim takes a handful of rows, so that fixed cost
// falls on few rows: several times a backlog's CPU per row. Past GATHER_MIN_RATE_PER_S the
// next drain therefore starts only once the gather time has passed since the last one began,
// and claims what came meanwhile in one claim, published at once. Below it (the latency case)
// nothing waits.
import { createMovingRate } from "../platform/moving-rate.ts";
import { IN_TURN_MAX } from "./batch.ts";

// Events a second past which the relay gathers. At 200/s a claim takes one row, 200 claims a
// second cost a fraction of a core, and the latency matters more; twice that, so that a burst
// at 200/s does not read as a stream (the rate is a moving figure over RATE_WINDOW_MS, and
// twice the expected count is far out for arrivals at random). Below the API's own busy rate
// (lib/platform/wakeup.ts): an API that shares its cores with the relay may never reach that,
// and then every NOTIFY would cost a claim of a few rows, CPU the API loses.
export const GATHER_MIN_RATE_PER_S = 400;
// The rows a claim need not exceed: past them the claim's fixed cost is small beside its rows'.
const GATHER_ROWS = 200;
// The arrival rate is a moving figure over about this long (lib/platform/moving-rate.ts): a burst
// of a few rows at 200/s (rows that committed together) must not read as a busy stream, nor a
// lull end one at once.
const RATE_WINDOW_MS = 100;
// The claim after a gather asks for this much more than the rows expected, so a stream that
// sped up meanwhile still comes in one claim (a claim that comes back short ends the drain).
const CLAIM_MARGIN = 1.5;

export interface Gather {
  /**
   * A drain that began at `began` (performance.now()) claimed `rows`. Returns when the next
   * drain may start: `began` when nothing need wait, later on a busy stream.
   */
  drained(began: number, rows: number): number;
  /** The rows due by `at`, with a margin, and never so few that their claim is published in turn: the size of the claim that takes them. */
  expected(at: number): number;
}

/** `maxMs` (RELAY_GATHER_MS): the longest an event waits to be gathered; 0 gathers nothing. */
export function createGather(maxMs: number): Gather {
  // Rows claimed over the time they took to come, from one drain's start to the next's.
  const rate = createMovingRate(RATE_WINDOW_MS);
  let began = 0;
  return {
    drained(at, claimed) {
      rate.add(claimed, at);
      began = at;
      const perMs = rate.perMs(at);
      if (maxMs <= 0 || perMs * 1000 < GATHER_MIN_RATE_PER_S) return at;
      return at + Math.min(maxMs, GATHER_ROWS / perMs);
    },
    expected(at) {
      // The rate as the last drain left it: the time since is the gather, not a lull. At
      // least a claim that goes out at once (batch.ts): a gather at 400-1,000 events/s brings
      // 16-40 rows, which a claim asking for that few would publish one row at a time.
      return Math.max(IN_TURN_MAX + 1, Math.ceil(rate.perMs(began) * Math.max(0, at - began) * CLAIM_MARGIN));
    },
  };
}

// The nemesis's schedule, drawn from the seed: for each fault, windows (start, length) that do
// not overlap one another, over the run's duration, and a storm in its middle where five
// faults are on at once. The same seed and duration give the same schedule.
import { seeded } from "../../testkit/http-fault-proxy.ts";

export const FAULTS = [
  "kill-api",
  "kill-relay",
  "kill-subscriber",
  "restart-broker",
  "restart-postgres",
  "cut-network",
  "processor-500-after",
  "processor-hang",
  "processor-down",
] as const;
export type Fault = (typeof FAULTS)[number];

export interface Window {
  readonly f: Fault;
  /** From the start of the load, ms. */
  readonly at: number;
  readonly ms: number;
}

// A fault lasts 2–6 s, with 8–28 s between two of its kind (nine kinds: the system is whole
// now and then, so recovery shows); Postgres stays down no more than 4 s.
const MIN_MS = 2000;
const SPREAD_MS = 4000;
const MIN_GAP_MS = 8000;
const GAP_SPREAD_MS = 20_000;
const POSTGRES_MAX_MS = 4000;
// Faults on at once in the storm, and how far apart they begin.
const STORM_FAULTS = 5;
const STORM_STAGGER_MS = 1500;
const STORM_MS = 6000;
// Nothing starts in the first seconds (the load gets going) or runs past the end.
const QUIET_START_MS = 3000;

export function schedule(seed: number, durationMs: number): Window[] {
  const random = seeded(seed);
  const storm = stormWindows(random, durationMs);
  const windows: Window[] = [...storm];
  for (const f of FAULTS) {
    const own = storm.find((w) => w.f === f);
    for (let at = QUIET_START_MS + random() * GAP_SPREAD_MS; ; at += MIN_GAP_MS + random() * GAP_SPREAD_MS) {
      const ms = Math.min(MIN_MS + random() * SPREAD_MS, f === "restart-postgres" ? POSTGRES_MAX_MS : Infinity);
      if (at + ms > durationMs) break;
      // Clear of its storm window by a gap, so a fault never overlaps itself.
      if (own && at < own.at + own.ms + MIN_GAP_MS && at + ms + MIN_GAP_MS > own.at) continue;
      windows.push({ f, at: Math.round(at), ms: Math.round(ms) });
      at += ms;
    }
  }
  return windows.sort((a, b) => a.at - b.at);
}

/** STORM_FAULTS faults drawn from the seed, begun a little apart around the middle, all on together for a while. */
function stormWindows(random: () => number, durationMs: number): Window[] {
  const pool: Fault[] = [...FAULTS];
  const picked: Fault[] = [];
  while (picked.length < STORM_FAULTS) picked.push(...pool.splice(Math.floor(random() * pool.length), 1));
  const begin = durationMs * (0.35 + random() * 0.2);
  return picked.map((f, i) => {
    const at = begin + i * (STORM_STAGGER_MS / STORM_FAULTS);
    const ms = f === "restart-postgres" ? POSTGRES_MAX_MS : STORM_MS - i * (STORM_STAGGER_MS / STORM_FAULTS) + random() * 1000;
    return { f, at: Math.round(at), ms: Math.round(ms) };
  });
}

/** The most windows on at once. */
export function overlapOf(windows: readonly Window[]): number {
  return Math.max(0, ...windows.map((w) => windows.filter((o) => o.at <= w.at && o.at + o.ms > w.at).length));
}

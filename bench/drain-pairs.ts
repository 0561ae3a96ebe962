// Drains compared in tight alternation: each side stays up and warm for the whole comparison
// (a `bun relay.ts` on a database of its own, a bare mqtt.js client on its connection), and
// the sides take turns on short runs of the same row count, the order rotated round by round;
// the figure is the median of the per-round ratios. Measured minutes apart, a relay and the
// bare client met different machine states on the shared VM (run T: per-pair ratios 0.41 to
// 2.39); seconds apart, both meet the same one.
import { readFileSync } from "node:fs";
import { processCpuSeconds } from "./cluster.ts";
import { insertChains, insertPending } from "../testkit/outbox.ts";
import type { Service } from "../testkit/processes.ts";
import { openBareClient, REFUNDS_PER_CHARGE, WARMUP, type BareClient, type RelayDrain } from "./mqtt-bench.ts";
import { BENCH_APP, drainRate, freshDatabase, median, startProcess, untilDrained, type FreshDb } from "./support.ts";

// Bounds a stuck drain; a healthy one of a round's rows takes about a second.
const DRAIN_TIMEOUT_MS = 180_000;

export type Backlog = "created" | "chains";

/** A `bun relay.ts` kept running on its own database: each drain() commits a backlog at once and times it. */
/** A drain, and the CPU per row the relay process and the database's other backends took for it (`/proc`). */
export interface CostedDrain extends RelayDrain {
  readonly relayUsPerRow: number;
  readonly postgresUsPerRow: number;
}

export interface WarmRelay {
  drain(rows: number, backlog?: Backlog): Promise<CostedDrain>;
  stop(): Promise<void>;
}

/**
 * Starts the relay (`env` added to its defaults; `cwd` another checkout's, which applies its own
 * schema) and warms it on WARMUP rows, as a relay in service is warm.
 */
export async function warmRelay(env: Record<string, string> = {}, cwd?: string): Promise<WarmRelay> {
  const db: FreshDb = await freshDatabase("drain", 2, cwd === undefined);
  let relay: Service | undefined;
  try {
    relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: `bench/${db.name}/`, ...env }, "/healthz", cwd);
    await insertPending(db.sql, WARMUP);
    await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
  } catch (error) {
    await relay?.child.stop();
    await db.drop();
    throw error;
  }
  const service = relay;
  return {
    async drain(rows, backlog = "created") {
      const started = performance.now();
      const before = await cpuOf(db, service.child.pid);
      const ids =
        backlog === "chains"
          ? (await insertChains(db.sql, Math.ceil(rows / (REFUNDS_PER_CHARGE + 1)), REFUNDS_PER_CHARGE)).flatMap((chain) => chain.events)
          : (await insertPending(db.sql, rows)).map((row) => row.id);
      const drainedAt = await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
      const after = await cpuOf(db, service.child.pid);
      const { rowsPerSec, seconds } = await drainRate(db.sql, ids, drainedAt);
      const us = (cpuSeconds: number): number => (cpuSeconds * 1e6) / ids.length;
      // A backend that opened during the drain counts from its start.
      const postgres = [...after.backends].reduce((total, [pid, cpu]) => total + cpu - (before.backends.get(pid) ?? 0), 0);
      return {
        rowsPerSec,
        rows: ids.length,
        wallSeconds: (performance.now() - started) / 1000,
        drainSeconds: seconds,
        relayUsPerRow: us(after.relay - before.relay),
        postgresUsPerRow: us(postgres),
      };
    },
    async stop() {
      await service.child.stop();
      await db.drop();
    },
  };
}

/**
 * CPU seconds so far of the relay process and of each backend on its database but the bench's
 * own (the relay's pool, whatever its release calls it); the insert's backend is the bench's.
 */
async function cpuOf(db: FreshDb, relayPid: number): Promise<{ relay: number; backends: Map<number, number> }> {
  const rows = await db.sql<{ pid: number }[]>`
    select pid from pg_stat_activity where datname = ${db.name} and application_name <> ${BENCH_APP} and pid <> pg_backend_pid()`;
  return { relay: processCpuSeconds(relayPid), backends: new Map(rows.map((r) => [r.pid, processCpuSeconds(r.pid)])) };
}

/** One side of a comparison: a name and a run of `rows` that answers rows (or messages) per second. */
export interface Side {
  readonly name: string;
  run(rows: number): Promise<number>;
  /** A relay's drains so far, with their CPU. */
  readonly drains?: CostedDrain[];
}

export function relaySide(name: string, relay: WarmRelay, backlog: Backlog = "created"): Side {
  const drains: CostedDrain[] = [];
  return {
    name,
    drains,
    async run(rows) {
      const d = await relay.drain(rows, backlog);
      drains.push(d);
      return d.rowsPerSec;
    },
  };
}

export const clientSide = (name: string, client: BareClient): Side => ({ name, run: (rows) => client.publish(rows) });

/** Each side's rate per round, by name, and the load average at each round's start. */
export interface Rounds {
  readonly rates: Record<string, number[]>;
  readonly loadAverages: string[];
}

export function loadAverage(): string {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
}

/** `rounds` rounds of every side on `rows`, the order rotated by one each round. */
export async function alternate(sides: readonly Side[], rounds: number, rows: number, onRound?: (i: number, rates: Record<string, number>) => void): Promise<Rounds> {
  const rates: Record<string, number[]> = Object.fromEntries(sides.map((s) => [s.name, []]));
  const loadAverages: string[] = [];
  for (let i = 0; i < rounds; i++) {
    loadAverages.push(loadAverage());
    const round: Record<string, number> = {};
    for (let k = 0; k < sides.length; k++) {
      const side = sides[(i + k) % sides.length] as Side;
      round[side.name] = await side.run(rows);
    }
    for (const side of sides) rates[side.name]?.push(round[side.name] as number);
    onRound?.(i, round);
  }
  return { rates, loadAverages };
}

/** The per-round ratios a / b, and their median. */
export function ratiosOf(r: Rounds, a: string, b: string): { median: number; each: number[] } {
  const as = r.rates[a] ?? [];
  const bs = r.rates[b] ?? [];
  const each = as.map((x, i) => x / (bs[i] ?? Number.NaN));
  return { median: median(each), each };
}

export { openBareClient, type BareClient };

// The relay at live traffic, through the real API (the API beside the relay at its full
// rate is bench/beside.ts): per event at paced rates (open loop through the API,
// bench/pacer.ts), the relay process's CPU and its Postgres backends' (/proc), and its
// batches (the "batch" lines of its log: one per claim that took rows; an empty claim writes none).
// `cwd` runs another checkout's relay (relay-baseline.ts checkoutOf) beside this API.
//   bun bench/relay-live.ts [pairs=3] [seconds=10] [baseline ref]   (the paced runs, with the ref's relay in turn)
import { startApi } from "./api-bench.ts";
import { processCpuSeconds } from "./cluster.ts";
import { sampleCpu } from "./cpu.ts";
import { openLoop } from "./pacer.ts";
import { checkoutOf } from "./relay-baseline.ts";
import { benchServices, freshDatabase, log, median, untilDrained, type FreshDb } from "./support.ts";
import type { Report } from "./report.ts";
import { tokenFor } from "../testkit/auth.ts";
import { RELAY_APP, startEntrypoint, type Service } from "../testkit/processes.ts";

export const CONNECTIONS = 32;
// Paced runs are warmed at their own rate first: a new process compiles in its first second.
const PACED_WARM_UP_SECONDS = 3;
// The events of the last paced second reach the broker within this.
export const DRAIN_TIMEOUT_MS = 30_000;

export interface PacedRun {
  readonly rate: number;
  readonly events: number;
  /** The relay process's CPU per event; its Postgres backends' (application_name charges-relay). */
  readonly relayUsPerEvent: number;
  readonly relayPostgresUsPerEvent: number;
  /** Claims that took rows, per second, and the rows each took on average. */
  readonly batchesPerSec: number;
  readonly rowsPerBatch: number;
  /** The relay process's CPU per claim that took rows (what empty claims cost is in it). */
  readonly relayUsPerBatch: number;
}

export interface RelayProcess {
  readonly service: Service;
  /** Its "batch" log lines so far: when (epoch ms, the line's own time) and the rows claimed. */
  readonly batches: { at: number; rows: number }[];
}

export async function startRelay(db: FreshDb, cwd: string | undefined): Promise<RelayProcess> {
  const { mqttUrl } = await benchServices();
  const batches: { at: number; rows: number }[] = [];
  const onLine = (line: string): void => {
    if (!line.includes('"msg":"batch"')) return;
    const { time, claimed } = JSON.parse(line) as { time: string; claimed?: number };
    batches.push({ at: Date.parse(time), rows: claimed ?? 0 });
  };
  const env = { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: `bench/${db.name}/`, LOG_LEVEL: "info" };
  const service = await startEntrypoint("relay", { name: "relay", env, cwd, stdout: onLine });
  return { service, batches };
}

/** One run of (2): `rate` POST/s through the API for `seconds`, after a warm-up at the same rate. */
export async function pacedRun(rate: number, seconds: number, cwd?: string): Promise<PacedRun> {
  const db = await freshDatabase("live", 4);
  const api = await startApi(db, "info");
  const relay = await startRelay(db, cwd);
  try {
    const token = await tokenFor();
    await openLoop([api.base], rate, PACED_WARM_UP_SECONDS, token);
    await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    const pid = relay.service.child.pid;
    const before = processCpuSeconds(pid);
    const backends = await sampleCpu(db.sql, RELAY_APP, [pid]);
    const started = { ms: performance.now(), at: Date.now() };
    const [paced] = await openLoop([api.base], rate, seconds, token);
    await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    const cost = await backends.stop();
    const cpu = processCpuSeconds(pid) - before;
    const elapsed = (performance.now() - started.ms) / 1000;
    const ended = Date.now();
    // Its log lines are read to the end once it has stopped (a pipe holds the last ones back).
    await relay.service.child.stop();
    const batches = relay.batches.filter((b) => b.at >= started.at && b.at <= ended);
    const events = paced?.created ?? 0;
    return {
      rate,
      events,
      relayUsPerEvent: (cpu * 1e6) / events,
      relayUsPerBatch: (cpu * 1e6) / Math.max(batches.length, 1),
      // Postgres's own processes (WAL writer, …) are in sampleCpu's figure too: shared with the API.
      relayPostgresUsPerEvent: ((cost.postgresS ?? Number.NaN) * 1e6) / events,
      batchesPerSec: batches.length / elapsed,
      rowsPerBatch: batches.reduce((n, b) => n + b.rows, 0) / Math.max(batches.length, 1),
    };
  } finally {
    await relay.service.child.stop();
    await api.child.stop();
    await db.drop();
  }
}

export function describePaced(p: PacedRun): string {
  return `${p.rate}/s: ${p.events} events, relay ${p.relayUsPerEvent.toFixed(0)} µs/event, its Postgres ${p.relayPostgresUsPerEvent.toFixed(0)} µs/event, ${p.batchesPerSec.toFixed(0)} batches/s of ${p.rowsPerBatch.toFixed(1)} rows`;
}

/** `bun run bench`'s "relay CPU at live rates": (2) above at 200 and 2,000 events/s, `runs` each. */
export async function liveCpuSection(report: Report, runs: number, seconds: number): Promise<void> {
  const all: PacedRun[] = [];
  for (const rate of [200, 2000]) {
    const paced: PacedRun[] = [];
    for (let i = 0; i < runs; i++) {
      paced.push(await pacedRun(rate, seconds));
      log(describePaced(paced[i]!));
    }
    all.push(...paced);
    const m = (f: (p: PacedRun) => number): number => median(paced.map(f));
    report.row(`relay CPU per event at ${rate}/s: relay process`, m((p) => p.relayUsPerEvent), "µs", "-", null);
    report.row(`relay CPU per event at ${rate}/s: its Postgres backends and Postgres's own processes`, m((p) => p.relayPostgresUsPerEvent), "µs", "-", null);
    report.row(`relay claims that took rows at ${rate}/s (rows per claim ${m((p) => p.rowsPerBatch).toFixed(1)})`, m((p) => p.batchesPerSec), "/s", "-", null);
    report.row(`relay CPU per claim that took rows at ${rate}/s (relay process, empty claims included)`, m((p) => p.relayUsPerBatch), "µs", "-", null);
  }
  report.raw.relayLive = all;
}

async function main(): Promise<void> {
  const [pairsArg, secondsArg, ref] = process.argv.slice(2);
  const pairs = Number(pairsArg ?? 3);
  const seconds = Number(secondsArg ?? 10);
  const baseline = ref ? await checkoutOf(ref) : undefined;
  try {
    for (const rate of [200, 2000]) {
      for (let i = 0; i < pairs; i++) {
        const now = await pacedRun(rate, seconds);
        log(`this: ${describePaced(now)}`);
        if (baseline) log(`before: ${describePaced(await pacedRun(rate, seconds, baseline.dir))}`);
      }
    }
  } finally {
    await baseline?.remove();
  }
}

if (import.meta.main) await main();

// The relay at live traffic, through the real API:
//  (1) beside the API: `bun api.ts` under wrk at 32 connections with `bun relay.ts`
//      publishing what it creates, against another `bun api.ts` with no relay, each on a
//      database of its own, both kept up and warm, short wrk runs on each in turn (besideSection);
//      created/s, and the relay's CPU per event at that rate;
//  (2) per event at paced rates (open loop through the API, bench/pacer.ts): the relay
//      process's CPU and its Postgres backends' (/proc), and its batches (the "batch" lines
//      of its log: one per claim that took rows; an empty claim writes none).
// `cwd` runs another checkout's relay (relay-baseline.ts checkoutOf) beside this API.
//   bun bench/relay-live.ts [pairs=3] [seconds=10] [baseline ref]   ((1) in 2 × pairs rounds; the paced runs with the ref's relay in turn)
import { answered, startApi, wrk, WARM_UP_SECONDS } from "./api-bench.ts";
import { loadAverage } from "./drain-pairs.ts";
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

export interface BesideRun {
  readonly withRelay: boolean;
  readonly createdPerSec: number;
  readonly p99Ms: number;
  /** The relay's process CPU per charge created over the run (null without a relay). */
  readonly relayUsPerEvent: number | null;
}

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

interface RelayProcess {
  readonly service: Service;
  /** Its "batch" log lines so far: when (epoch ms, the line's own time) and the rows claimed. */
  readonly batches: { at: number; rows: number }[];
}

async function startRelay(db: FreshDb, cwd: string | undefined): Promise<RelayProcess> {
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

/** An API on a database of its own, kept up for a whole comparison, with or without a relay beside it. */
export interface Stack {
  readonly db: FreshDb;
  readonly api: Service;
  readonly relay: RelayProcess | undefined;
}

export async function startStack(withRelay: boolean, cwd: string | undefined, apiEnv: Record<string, string> = {}): Promise<Stack> {
  const db = await freshDatabase("live", 2);
  let api: Service | undefined;
  try {
    api = await startApi(db, "info", apiEnv);
    const relay = withRelay ? await startRelay(db, cwd) : undefined;
    return { db, api, relay };
  } catch (error) {
    await api?.child.stop();
    await db.drop();
    throw error;
  }
}

export async function stopStack(s: Stack): Promise<void> {
  await s.relay?.service.child.stop();
  await s.api.child.stop();
  await s.db.drop();
}

/**
 * One turn of a tight comparison: wrk on the stack's API for `seconds`; with a relay, the
 * turn ends when it has published what the run created, so its work never spills into the
 * other stack's turn. The relay's CPU from the run's start to then, per charge created.
 */
export async function turn(s: Stack, seconds: number, token: string): Promise<BesideRun> {
  const relayPid = s.relay?.service.child.pid;
  const relayCpu = relayPid === undefined ? 0 : processCpuSeconds(relayPid);
  const run = await wrk(s.api.port, CONNECTIONS, seconds, undefined, token);
  if (relayPid !== undefined) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
  const created = answered(run, 201);
  const cpu = relayPid === undefined ? 0 : processCpuSeconds(relayPid) - relayCpu;
  return { withRelay: relayPid !== undefined, createdPerSec: created / seconds, p99Ms: run.p99Us / 1000, relayUsPerEvent: relayPid === undefined ? null : (cpu * 1e6) / created };
}

/**
 * `bun run bench`'s "relay beside the API", in tight alternation: two APIs, each on a database
 * of its own, one with a relay publishing what it creates, both up and warm (a wrk warm-up
 * each) for the whole section; then `rounds` rounds of a `seconds` wrk run on each, the order
 * alternated; the median of the per-round ratios. Measured as fresh stacks minutes apart, the
 * pairs swung 0.62..1.39 with the machine (run T).
 */
export async function besideSection(report: Pick<Report, "row" | "notes" | "raw">, rounds: number, seconds: number, cwd?: string): Promise<void> {
  const alone = await startStack(false, undefined);
  const withRelay = await startStack(true, cwd);
  const runs: { alone: BesideRun; beside: BesideRun; load: string }[] = [];
  try {
    const token = await tokenFor();
    for (const s of [alone, withRelay]) await wrk(s.api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
    await untilDrained(withRelay.db.sql, DRAIN_TIMEOUT_MS);
    for (let i = 0; i < rounds; i++) {
      const load = loadAverage();
      const first = i % 2 === 0 ? await turn(alone, seconds, token) : undefined;
      const beside = await turn(withRelay, seconds, token);
      const a = first ?? (await turn(alone, seconds, token));
      runs.push({ alone: a, beside, load });
      log(`round ${i + 1} (load ${load}): API alone ${a.createdPerSec.toFixed(0)}/s, with the relay ${beside.createdPerSec.toFixed(0)}/s (relay ${beside.relayUsPerEvent?.toFixed(0)} µs/event): ${(beside.createdPerSec / a.createdPerSec).toFixed(2)}`);
    }
  } finally {
    await Promise.allSettled([stopStack(alone), stopStack(withRelay)]);
  }
  report.raw.relayBeside = runs;
  const ratios = runs.map((r) => r.beside.createdPerSec / r.alone.createdPerSec);
  report.row(
    `API created/s with the relay publishing them vs with no relay (wrk, 32 conns, ${rounds} rounds of ${seconds} s alternated)`,
    median(runs.map((r) => r.beside.createdPerSec)),
    "/s",
    ">= 0.85",
    (r) => r >= 0.85,
    median(runs.map((r) => r.alone.createdPerSec)),
    median(ratios),
  );
  report.row("relay CPU per event beside the API at its full rate", median(runs.map((r) => r.beside.relayUsPerEvent ?? Number.NaN)), "µs", "-", null);
  report.notes.push(`relay beside the API: created/s ratio per round ${ratios.map((r) => r.toFixed(2)).join(", ")}; load average per round ${runs.map((r) => r.load).join(" | ")}`);
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
    // The figures as lines rather than bun run bench's table.
    const notes: string[] = [];
    const lines: Pick<Report, "row" | "notes" | "raw"> = {
      notes,
      raw: {},
      row: (figure, ours, _unit, _target, _check, limit, ratio) => console.log(`${figure}: ${ours?.toFixed(0)} vs ${limit?.toFixed(0) ?? "-"}: ${ratio?.toFixed(2) ?? "-"}`),
    };
    await besideSection(lines, pairs * 2, seconds);
    for (const note of notes) console.log(note);
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

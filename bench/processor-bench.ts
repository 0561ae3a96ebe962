// Row 16: the processor mode (PAYMENT_PROCESSOR=stripe, the simulator answering every call
// after PROCESSOR_LATENCY_MS) against the ledger mode (PAYMENT_PROCESSOR=none), in one run, both
// with a pool of POOL_SIZE and wrk at PROCESSOR_CONNECTIONS: a request waiting for the
// processor holds no pooled connection, so the processor mode's created/s is bounded by the
// clients' concurrency over the calls' latency, not by the pool. Then the ledger path against
// the API before the processor (LEDGER_BASELINE), side by side, for the cost of its new column.
//   bun bench/processor-bench.ts [pairs=2] [seconds=10] [sideBySideRounds=3]
//   bun bench/processor-bench.ts --runs <latencyMs>@<clients> …: only processor runs at those settings (pool 8, 10 s)
import { runAlone, type Report } from "./report.ts";
import { answered, createdAndLatency, errorsOf, wrk, WARM_UP_SECONDS, type WrkResult } from "./api-bench.ts";
import { machineState } from "./cluster.ts";
import { microsPer, sampleCpu } from "./cpu.ts";
import { checkoutOf, LEDGER_BASELINE } from "./relay-baseline.ts";
import { reportProcessor, type ProcessorPair } from "./processor-report.ts";
import { compareSideBySide } from "./side-by-side.ts";
import { benchServices, freshDatabase, log, type FreshDb } from "./support.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { API_APP, startEntrypoint } from "../testkit/processes.ts";
import { chargeWith, processorEnv } from "../testkit/processor.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { waitUntil } from "../testkit/wait.ts";

// The issue's load (#31 item 10): 200 ms per processor call, a pool of 8, 400 clients.
export const PROCESSOR_LATENCY_MS = 200;
const POOL_SIZE = 8;
const PROCESSOR_CONNECTIONS = 400;
// The ledger's usual load (bench/README.md row 2), beside the 400 clients.
const LEDGER_CONNECTIONS = 32;
// A charge makes two processor calls in turn (create, then confirm), each answered after the latency.
const CALLS_PER_CHARGE = 2;
// The issue's bound, 400 / 0.2 s, takes 200 ms as a charge's time at the processor: each pair
// also runs the mode with that time split over the charge's two calls, beside the stricter
// 200 ms per call (bench/README.md, "Processor mode").
const PER_CHARGE_CALL_MS = PROCESSOR_LATENCY_MS / CALLS_PER_CHARGE;
// Far above a call's 200 ms: a timeout would be the machine's stall, not the simulator's latency.
const CALL_TIMEOUT_MS = 10_000;
// Bun's fetch sends at most 256 requests at once unless BUN_CONFIG_MAX_HTTP_REQUESTS says more
// (its docs, "fetch"); the rest queue inside Bun. 400 clients hold up to 400 calls at once, so
// the API is started with room for them, as docs/operations.md tells a deployment to.
// BENCH_BUN_MAX_HTTP_REQUESTS=256 measures Bun's default.
const BUN_MAX_HTTP_REQUESTS = process.env.BENCH_BUN_MAX_HTTP_REQUESTS ?? "1024";
// How often the run's connections are looked at in pg_stat_activity (a handful of samples a run).
const SAMPLE_EVERY_MS = 1_000;
// Requests cut off by wrk's end finish on their own (two calls, then phase 3) within this.
const SETTLE_TIMEOUT_MS = 30_000;

export type { ConnectionSample, Mode, ModeRun } from "./processor-report.ts";
import type { ConnectionSample, Mode, ModeRun } from "./processor-report.ts";

/** The API's connections in pg_stat_activity while the load ran, and the processor's calls in flight then. */

async function sampleConnections(db: FreshDb, sim: ProcessorSim | undefined): Promise<ConnectionSample> {
  const [row] = await db.sql<{ connections: number; idle_in_tx: number; active: number; idle_ms: number; xact_ms: number; idle_statements: string[] | null }[]>`
    select count(*)::int as connections,
           (count(*) filter (where state = 'idle in transaction'))::int as idle_in_tx,
           (count(*) filter (where state = 'active'))::int as active,
           coalesce(max(extract(epoch from clock_timestamp() - state_change) * 1000) filter (where state = 'idle in transaction'), 0)::float8 as idle_ms,
           coalesce(max(extract(epoch from clock_timestamp() - xact_start) * 1000), 0)::float8 as xact_ms,
           array_agg(distinct left(btrim(regexp_replace(query, '\\s+', ' ', 'g')), 48)) filter (where state = 'idle in transaction') as idle_statements
      from pg_stat_activity where application_name = ${API_APP} and datname = current_database()`;
  const callsInFlight = sim ? sim.requests().filter((r) => r.state === "in-flight").length : null;
  return { connections: row?.connections ?? 0, idleInTransaction: row?.idle_in_tx ?? 0, active: row?.active ?? 0, longestIdleInTxMs: row?.idle_ms ?? 0, oldestTransactionMs: row?.xact_ms ?? 0, idleStatements: row?.idle_statements ?? [], callsInFlight };
}

/** Samples every SAMPLE_EVERY_MS until `done` settles: the measured run's connections. */
async function sampleWhile(done: Promise<unknown>, db: FreshDb, sim: ProcessorSim | undefined): Promise<ConnectionSample[]> {
  const samples: ConnectionSample[] = [];
  let finished = false;
  void done.finally(() => (finished = true)).catch(() => undefined);
  while (!finished) {
    await Promise.race([done.catch(() => undefined), Bun.sleep(SAMPLE_EVERY_MS)]);
    if (!finished) samples.push(await sampleConnections(db, sim));
  }
  return samples;
}

async function chargesByStatus(db: FreshDb): Promise<Record<string, number>> {
  const rows = await db.sql<{ status: string; n: number }[]>`select status, count(*)::int as n from charges group by status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

// Enough to see what an unexpected answer was, without keeping a flood of the same line.
const KEPT_ERROR_LINES = 5;

/** The API's error lines (its stdout, one JSON object a line), counted by answer and cause. */
function errorLog(): { line: (line: string) => void; close: () => void; causes: Record<string, number>; kept: string[] } {
  const causes: Record<string, number> = {};
  const kept: string[] = [];
  let closed = false;
  const line = (text: string): void => {
    if (closed || !text.includes('"level":"error"') && !text.includes('"level":"warn"')) return;
    const entry = JSON.parse(text) as { status?: number; error?: string; msg?: string };
    const cause = `${entry.status ?? "-"} ${(entry.error ?? entry.msg ?? "").split(":")[0]}`;
    causes[cause] = (causes[cause] ?? 0) + 1;
    if (!cause.includes("POOL_WAIT_TIMEOUT") && kept.length < KEPT_ERROR_LINES) kept.push(text);
  };
  // Closed before the API is stopped: requests wrk left behind fail at the stop, not under the load.
  return { line, close: () => (closed = true), causes, kept };
}

const total = (byStatus: Record<string, number>): number => Object.values(byStatus).reduce((n, v) => n + v, 0);

function addStatuses(runs: readonly WrkResult[]): Record<string, number> {
  const sum: Record<string, number> = {};
  for (const r of runs) for (const [status, n] of Object.entries(r.statuses)) sum[status] = (sum[status] ?? 0) + n;
  return sum;
}

/** One `bun api.ts` in `mode` on a fresh database: warm-up, then the measured wrk run with its CPU and connection samples. */
export async function modeRun(mode: Mode, connections: number, seconds: number, sim: ProcessorSim, cwd?: string): Promise<ModeRun> {
  // Another checkout's api.ts migrates a database of its own (this one's migrations may be newer).
  const db = await freshDatabase(mode, 4, cwd === undefined);
  const processor = mode === "processor";
  const env = {
    API_POOL_SIZE: String(POOL_SIZE),
    ...(processor ? { ...processorEnv(sim, CALL_TIMEOUT_MS), BUN_CONFIG_MAX_HTTP_REQUESTS: BUN_MAX_HTTP_REQUESTS } : { PAYMENT_PROCESSOR: "none" }),
  };
  const apiLog = errorLog();
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, MQTT_URL: (await benchServices()).mqttUrl, LOG_LEVEL: "info", ...authEnv(), ...env }, stdout: apiLog.line, cwd });
  const token = await tokenFor();
  const body = processor ? chargeWith(4900) : undefined;
  const paymentsBefore = sim.ledger().paymentIntents.length;
  try {
    const warm = await wrk(api.port, connections, WARM_UP_SECONDS, undefined, token, body);
    const cpu = await sampleCpu(db.sql, API_APP, [api.child.pid]);
    const benchCpu = process.cpuUsage();
    const running = wrk(api.port, connections, seconds, undefined, token, body);
    const samples = await sampleWhile(running, db, processor ? sim : undefined);
    const run = await running;
    const cost = await cpu.stop();
    const benchSpent = process.cpuUsage(benchCpu);
    const created = answered(run, 201);
    // The charges cut off by wrk's end finish in the API: wait for them before counting calls.
    await waitUntil(async () => ((await chargesByStatus(db)).pending ?? 0) === 0 || undefined, SETTLE_TIMEOUT_MS, "cut-off charges to finish").catch(() => undefined);
    const byStatus = await chargesByStatus(db);
    apiLog.close();
    const payments = sim.ledger().paymentIntents.slice(paymentsBefore);
    const perCharge = (n: number) => (processor && total(byStatus) > 0 ? n / total(byStatus) : null);
    return {
      mode,
      connections,
      ...createdAndLatency(run),
      statuses: addStatuses([warm, run]),
      errors: errorsOf(warm) + errorsOf(run),
      apiUsPerCharge: microsPer(cost.processS, created),
      postgresUsPerCharge: microsPer(cost.postgresS, created),
      benchUsPerCharge: microsPer((benchSpent.user + benchSpent.system) / 1e6, created),
      samples,
      createsPerCharge: perCharge(payments.length),
      confirmsPerCharge: perCharge(payments.reduce((n, p) => n + p.confirmations, 0)),
      chargesByStatus: byStatus,
      errorCauses: apiLog.causes,
      errorLines: apiLog.kept,
    };
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

export function describeMode(r: ModeRun): string {
  const peak = (f: (s: ConnectionSample) => number | null) => Math.max(...r.samples.map((s) => f(s) ?? 0));
  return `${r.mode} at ${r.connections}: ${Math.round(r.createdPerSec)} created/s, p50 ${r.p50Ms.toFixed(0)} p99 ${r.p99Ms.toFixed(0)} ms, ` +
    `API ${r.apiUsPerCharge?.toFixed(0) ?? "-"} µs/charge, statuses ${JSON.stringify(r.statuses)}, errors ${r.errors}, ` +
    `error causes ${JSON.stringify(r.errorCauses)}${r.errorLines.length > 0 ? ` (${r.errorLines.join(" ")})` : ""}, ` +
    `idle-in-transaction statements ${JSON.stringify([...new Set(r.samples.flatMap((s) => s.idleStatements))])}, ` +
    `bench (simulator) ${r.benchUsPerCharge?.toFixed(0) ?? "-"} µs/charge, ` +
    `connections ≤ ${peak((s) => s.connections)} (idle in transaction ≤ ${peak((s) => s.idleInTransaction)} for ≤ ${peak((s) => s.longestIdleInTxMs).toFixed(0)} ms, oldest transaction ${peak((s) => s.oldestTransactionMs).toFixed(0)} ms; calls in flight ≥ ${Math.min(...r.samples.map((s) => s.callsInFlight ?? 0))})` +
    (r.createsPerCharge === null ? "" : `, creates/confirms per charge ${r.createsPerCharge.toFixed(3)}/${r.confirmsPerCharge?.toFixed(3)}`);
}

/** The section: `pairs` of (ledger at 400, processor at 400 with 200 ms a call and with 200 ms a charge, ledger at 32), then the ledger side by side with the API before the processor. */
export async function processorSection(report: Report, pairs: number, seconds: number, sideBySideRounds: number): Promise<void> {
  const state = await machineState();
  report.raw.processorMachine = state;
  report.notes.push(`processor mode: pgbench ${Math.round(state.pgbenchTps)} tps, load average ${state.loadAverage} at the start`);
  const sim = await startProcessorSim({ latencyMs: PROCESSOR_LATENCY_MS });
  const runs: ProcessorPair[] = [];
  try {
    for (let i = 0; i < pairs; i++) {
      const ledger = await modeRun("ledger", PROCESSOR_CONNECTIONS, seconds, sim);
      log(`pair ${i + 1}: ${describeMode(ledger)}`);
      const processor = await modeRun("processor", PROCESSOR_CONNECTIONS, seconds, sim);
      log(`pair ${i + 1}: ${describeMode(processor)}`);
      sim.setFaults({ latencyMs: PER_CHARGE_CALL_MS });
      const perCharge = await modeRun("processor", PROCESSOR_CONNECTIONS, seconds, sim).finally(() => sim.clearFaults());
      log(`pair ${i + 1}, ${PER_CHARGE_CALL_MS} ms a call: ${describeMode(perCharge)}`);
      const ledgerAt32 = await modeRun("ledger", LEDGER_CONNECTIONS, seconds, sim);
      log(`pair ${i + 1}: ${describeMode(ledgerAt32)}`);
      runs.push({ ledger, processor, perCharge, ledgerAt32 });
    }
  } finally {
    await sim.stop();
  }
  report.raw.processorMode = runs;
  const baseline = await checkoutOf(process.env.BENCH_LEDGER_BASELINE ?? LEDGER_BASELINE);
  try {
    const c = await compareSideBySide(sideBySideRounds, LEDGER_CONNECTIONS, seconds, { label: "now", env: { PAYMENT_PROCESSOR: "none" } }, { label: "before", env: {}, cwd: baseline.dir, ownDatabase: true });
    report.raw.ledgerVsBefore = c;
    reportProcessor(report, runs, c, { connections: PROCESSOR_CONNECTIONS, latencyMs: PROCESSOR_LATENCY_MS, callsPerCharge: CALLS_PER_CHARGE, pool: POOL_SIZE, ledgerConnections: LEDGER_CONNECTIONS });
  } finally {
    await baseline.remove();
  }
}

/** Processor-mode runs alone, one per `<latencyMs>@<clients>`: where its own ceiling is, and what 400 clients change. */
async function adHocRuns(settings: readonly string[]): Promise<void> {
  const sim = await startProcessorSim({ latencyMs: PROCESSOR_LATENCY_MS });
  try {
    for (const setting of settings) {
      const [latencyMs, clients] = setting.split("@").map(Number);
      sim.setFaults({ latencyMs: latencyMs ?? PROCESSOR_LATENCY_MS });
      console.log(`${latencyMs} ms a call: ${describeMode(await modeRun("processor", clients ?? PROCESSOR_CONNECTIONS, 10, sim))}`);
    }
  } finally {
    await sim.stop();
  }
}

if (import.meta.main && process.argv[2] === "--runs") {
  await adHocRuns(process.argv.slice(3));
  process.exit(0);
} else if (import.meta.main) {
  const [pairs, seconds, rounds] = [Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 10), Number(process.argv[4] ?? 3)];
  await runAlone("processor mode", (report) => processorSection(report, pairs, seconds, rounds));
}

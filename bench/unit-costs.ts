// What one charge and one event cost, measured on a Postgres cluster of the bench's own
// (cluster.ts), for the capacity model of docs/scaling.md. Each round, three phases:
//  1. API: `bun api.ts` alone, wrk at 32 connections for a fixed time after a warm-up; per
//     charge, the CPU of the API process, of the whole cluster and of wrk, the WAL bytes
//     (pg_current_wal_lsn) and records, and the write transactions (transaction ids);
//  2. relay: `bun relay.ts` on a database of its own, warmed with a small backlog, then as many
//     rows as phase 1 created, committed at once and drained; per event, the same figures;
//  3. both: API and relay together under the same wrk load, the steady state the model
//     predicts: its created/s against (the cores less the CPU other processes took) divided by
//     the per-charge sum of phases 1 and 2.
//   bun bench/unit-costs.ts [rounds=3] [seconds=10]
import { runAlone, type Report } from "./report.ts";
import { answered, startApi, wrk, WARM_UP_SECONDS } from "./api-bench.ts";
import { benchCluster, countersSince, dbCounters, machineBusySeconds, machineState, processCpuSeconds, reapedChildrenCpuSeconds, type BenchCluster, type DbCounters } from "./cluster.ts";
import { benchServices, log, median, startProcess, untilDrained, type FreshDb } from "./support.ts";
import { insertPending } from "../testkit/outbox.ts";
import { tokenFor } from "../testkit/auth.ts";
import { notifyOutbox } from "../lib/platform/wakeup.ts";

const CONNECTIONS = 32;
const CORES = 2;
// Drained before the measured backlog, so the relay's first second of compiling is not in it.
const RELAY_WARM_UP_ROWS = 5_000;
const DRAIN_TIMEOUT_MS = 300_000;
// The relay wakes only for the bench's NOTIFY: the measured backlog starts when the bench says.
const RELAY_ENV = { OUTBOX_POLL_MS: "3600000" };

/** Per unit of work (a charge or an event): CPU in µs, WAL in bytes. */
export interface UnitCost {
  readonly units: number;
  readonly perSec: number;
  /** The process under test: `bun api.ts` or `bun relay.ts`. */
  readonly processUs: number;
  /** Every process of the cluster. */
  readonly postgresUs: number;
  /** wrk (phase 1 and 3 only; 0 for the relay). */
  readonly clientUs: number;
  readonly walBytes: number;
  readonly walRecords: number;
  readonly walFpi: number;
  readonly writeTransactions: number;
}

export interface Round {
  readonly api: UnitCost;
  readonly relay: UnitCost;
  /** Phase 3: API and relay at once; processUs is theirs together. */
  readonly both: Loaded;
  /** created/s predicted for phase 3 from phases 1 and 2. */
  readonly predictedPerSec: number;
  /**
   * Phase 3's created/s over what its own per-charge CPU would allow on the cores other
   * processes left: 1 when CPU is all that bounds it.
   */
  readonly cpuBound: number;
}

interface Mark {
  readonly at: number;
  readonly proc: number;
  readonly postgres: number;
  readonly client: number;
  readonly busy: number;
  readonly counters: DbCounters;
}

async function mark(cluster: BenchCluster, db: FreshDb, pids: readonly number[]): Promise<Mark> {
  return {
    at: performance.now(),
    proc: pids.reduce((s, pid) => s + processCpuSeconds(pid), 0),
    postgres: cluster.cpuSeconds(),
    client: reapedChildrenCpuSeconds(),
    busy: machineBusySeconds(),
    counters: await dbCounters(db.sql),
  };
}

function costOf(a: Mark, b: Mark, units: number): UnitCost {
  const c = countersSince(a.counters, b.counters);
  const us = (s: number) => (s * 1e6) / units;
  return {
    units,
    perSec: units / ((b.at - a.at) / 1000),
    processUs: us(b.proc - a.proc),
    postgresUs: us(b.postgres - a.postgres),
    clientUs: us(b.client - a.client),
    walBytes: c.walLsn / units,
    walRecords: c.walRecords / units,
    walFpi: c.walFpi / units,
    writeTransactions: c.writeTransactions / units,
  };
}

async function count(db: FreshDb, table: "charges" | "pending"): Promise<number> {
  const [row] = table === "charges"
    ? await db.sql<{ n: number }[]>`select count(*)::int as n from charges`
    : await db.sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null`;
  return row?.n ?? 0;
}

interface Loaded extends UnitCost {
  /** µs per charge of the API process and of the relay process (0 without one). */
  readonly apiUs: number;
  readonly relayUs: number;
  /** Cores other processes of the machine kept busy meanwhile (other helpers, the bench itself). */
  readonly othersCores: number;
  /** Rows still unpublished when the load stopped. */
  readonly pendingAtEnd: number;
}

/** Phase 1, or 3 with a relay running: wrk's warm-up, then `seconds` measured. */
async function underLoad(cluster: BenchCluster, db: FreshDb, seconds: number, withRelay: boolean): Promise<Loaded> {
  const api = await startApi(db, "info");
  const relay = withRelay ? await startProcess("relay", db, { MQTT_TOPIC_PREFIX: `bench/${db.name}/` }) : undefined;
  const token = await tokenFor();
  try {
    await wrk(api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
    const pids = [api.child.pid, ...(relay ? [relay.child.pid] : [])];
    const charges = await count(db, "charges");
    const a = await mark(cluster, db, pids);
    const apiBefore = processCpuSeconds(api.child.pid);
    const run = await wrk(api.port, CONNECTIONS, seconds, undefined, token);
    const apiS = processCpuSeconds(api.child.pid) - apiBefore;
    const b = await mark(cluster, db, pids);
    const units = (await count(db, "charges")) - charges;
    const cost = costOf(a, b, units);
    const ours = b.proc - a.proc + (b.postgres - a.postgres) + (b.client - a.client);
    const othersCores = Math.max(0, b.busy - a.busy - ours) / ((b.at - a.at) / 1000);
    const pendingAtEnd = withRelay ? await count(db, "pending") : units;
    log(`${withRelay ? "api + relay" : "api"}: ${answered(run, 201)} created (${units} in the database), ${Math.round(cost.perSec)}/s, p99 ${(run.p99Us / 1000).toFixed(1)} ms`);
    const apiUs = (apiS * 1e6) / units;
    return { ...cost, apiUs, relayUs: cost.processUs - apiUs, othersCores, pendingAtEnd };
  } finally {
    await relay?.child.stop();
    await api.child.stop();
  }
}

/** Phase 2: `rows` committed at once and drained by a warm relay. */
async function relayBacklog(cluster: BenchCluster, db: FreshDb, rows: number): Promise<UnitCost> {
  const relay = await startProcess("relay", db, { ...RELAY_ENV, MQTT_TOPIC_PREFIX: `bench/${db.name}/` });
  try {
    await insertPending(db.sql, RELAY_WARM_UP_ROWS);
    await notifyOutbox(db.sql);
    await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    await insertPending(db.sql, rows);
    const a = await mark(cluster, db, [relay.child.pid]);
    await notifyOutbox(db.sql);
    await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    const b = await mark(cluster, db, [relay.child.pid]);
    return costOf(a, b, rows);
  } finally {
    await relay.child.stop();
  }
}

/** The model: every charge costs the sum of its unit costs, on the cores other processes left. */
export function predictedRate(api: UnitCost, relay: UnitCost, cores: number): number {
  const us = api.processUs + api.postgresUs + api.clientUs + relay.processUs + relay.postgresUs;
  return (cores * 1e6) / us;
}

export async function unitCostRound(cluster: BenchCluster, seconds: number): Promise<Round> {
  const dbs: FreshDb[] = [];
  const fresh = async (label: string) => {
    const db = await cluster.database(label);
    dbs.push(db);
    return db;
  };
  try {
    const api = await underLoad(cluster, await fresh("unit_api"), seconds, false);
    const relay = await relayBacklog(cluster, await fresh("unit_relay"), api.units);
    const both = await underLoad(cluster, await fresh("unit_both"), seconds, true);
    const predictedPerSec = predictedRate(api, relay, CORES - both.othersCores);
    const cpuBound = both.perSec / (((CORES - both.othersCores) * 1e6) / (both.processUs + both.postgresUs + both.clientUs));
    log(`relay: ${relay.units} rows at ${Math.round(relay.perSec)}/s | predicted ${Math.round(predictedPerSec)} created/s with both, measured ${Math.round(both.perSec)} (others took ${both.othersCores.toFixed(2)} cores, ${both.pendingAtEnd} pending at the end)`);
    return { api, relay, both, predictedPerSec, cpuBound };
  } finally {
    for (const db of dbs) await db.drop();
  }
}

export async function unitCosts(rounds: number, seconds: number): Promise<Round[]> {
  await benchServices();
  const cluster = await benchCluster();
  try {
    const out: Round[] = [];
    for (let i = 0; i < rounds; i++) out.push(await unitCostRound(cluster, seconds));
    return out;
  } finally {
    await cluster.remove();
  }
}

/** The rows of `bun run bench`'s table. */
export function reportUnitCosts(report: Report, rounds: readonly Round[]): void {
  report.raw.unitCosts = rounds;
  const m = (f: (r: Round) => number) => median(rounds.map(f));
  report.row("per charge (API alone): API process CPU", m((r) => r.api.processUs), "µs", "-", null);
  report.row("per charge (API alone): Postgres cluster CPU", m((r) => r.api.postgresUs), "µs", "-", null);
  report.row("per charge (API alone): wrk CPU", m((r) => r.api.clientUs), "µs", "-", null);
  report.row("per charge (API alone): WAL bytes", m((r) => r.api.walBytes), "B", "-", null);
  report.row("per 1,000 charges (API alone): write transactions", m((r) => r.api.writeTransactions * 1000), "", "-", null);
  report.row("per event (relay drain): relay process CPU", m((r) => r.relay.processUs), "µs", "-", null);
  report.row("per event (relay drain): Postgres cluster CPU", m((r) => r.relay.postgresUs), "µs", "-", null);
  report.row("per event (relay drain): WAL bytes", m((r) => r.relay.walBytes), "B", "-", null);
  report.row("per 1,000 events (relay drain): write transactions", m((r) => r.relay.writeTransactions * 1000), "", "-", null);
  report.row("per charge (API + relay at once): API process CPU", m((r) => r.both.apiUs), "µs", "-", null);
  report.row("per charge (API + relay at once): relay process CPU", m((r) => r.both.relayUs), "µs", "-", null);
  report.row("per charge (API + relay at once): Postgres cluster CPU", m((r) => r.both.postgresUs), "µs", "-", null);
  report.row("per charge (API + relay at once): WAL bytes", m((r) => r.both.walBytes), "B", "-", null);
  report.row("per 1,000 charges (API + relay at once): write transactions", m((r) => r.both.writeTransactions * 1000), "", "-", null);
  report.row("API + relay created/s: measured vs the model's prediction", m((r) => r.both.perSec), "/s", "-", null, m((r) => r.predictedPerSec), m((r) => r.both.perSec / r.predictedPerSec));
  report.row("API + relay created/s over what their own CPU per charge allows", m((r) => r.cpuBound), "", "-", null);
  // The steady-state model tested across rounds: each round's rate predicted from the other
  // rounds' CPU per charge and its own free cores.
  const total = (r: Round) => r.both.processUs + r.both.postgresUs + r.both.clientUs;
  const crossRatios = rounds.length < 2 ? [] : rounds.map((r, i) => r.both.perSec / (((CORES - r.both.othersCores) * 1e6) / median(rounds.filter((_, j) => j !== i).map(total))));
  if (crossRatios.length > 0) {
    report.row("API + relay created/s: measured vs predicted from the other rounds' CPU per charge", m((r) => r.both.perSec), "/s", "-", null, null, median(crossRatios));
    report.notes.push(`unit costs: measured/predicted from the other rounds' CPU per charge, per round ${crossRatios.map((x) => x.toFixed(2)).join(", ")}`);
  }
  report.notes.push(`unit costs: measured/predicted per round ${rounds.map((r) => (r.both.perSec / r.predictedPerSec).toFixed(2)).join(", ")}; other processes took ${rounds.map((r) => r.both.othersCores.toFixed(2)).join(", ")} cores`);
}

/** The section of `bun run bench`, and the script run alone. */
export async function unitCostsSection(report: Report, rounds: number, seconds: number): Promise<void> {
  const state = await machineState();
  report.raw.unitCostsMachine = state;
  report.notes.push(`unit costs: pgbench ${Math.round(state.pgbenchTps)} tps, load average ${state.loadAverage} at the start; ${rounds} rounds of ${seconds} s`);
  reportUnitCosts(report, await unitCosts(rounds, seconds));
}

if (import.meta.main) {
  await runAlone("unit costs", (report) => unitCostsSection(report, Number(process.argv[2] ?? 3), Number(process.argv[3] ?? 10)));
}

// Outbox growth under retention (issue #33, item 4): two databases on a cluster of the bench's
// own (cluster.ts: autovacuum on, as a production server has it), each seeded with a day of
// published rows already past the retention, each with its `bun api.ts` and `bun relay.ts`,
// and one open-loop pacer sending the same rate to both (latency from each request's
// scheduled time, as wrk2 counts it). During the first soak `bun run ops outbox-retention`
// runs on one of them, again and again until a run deletes nothing; then both are vacuumed
// (what autovacuum does after such a delete; it is off on both outboxes until then, so that
// the vacuum's whole cost is counted) and a second soak, autovacuum on, shows whether new rows
// reuse the space. Reported: created/s and p99 with and without retention, the job's rows/s and its
// CPU per row deleted (the ops process, its Postgres backend), and pg_total_relation_size of
// each outbox at each step. Which database gets the job alternates from round to round.
//   bun bench/outbox-growth.ts [rounds=2] [seconds=30] [rate=150] [seeded=300000]
import { readFileSync } from "node:fs";
import { runAlone, type Report } from "./report.ts";
import { startApi, WARM_UP_SECONDS } from "./api-bench.ts";
import { benchCluster, machineState, type BenchCluster } from "./cluster.ts";
import { openLoop, type Paced } from "./pacer.ts";
import { benchServices, log, median, startProcess, untilDrained, type FreshDb } from "./support.ts";
import { ROOT, type Service } from "../testkit/processes.ts";
import { tokenFor } from "../testkit/auth.ts";

// Seeded rows are this old (their created_at spread over the day before): past the default
// retention of 7 days, which the job runs with.
const SEED_AGE_DAYS = 8;
// The relays' own retention (they run the job every 5 min too): longer than the seed's age, so
// only the bench's `bun run ops` deletes.
const RELAY_RETENTION_SECONDS = String(30 * 86_400);
const DRAIN_TIMEOUT_MS = 120_000;
const TICKS_PER_SECOND = 100;

interface Arm {
  readonly db: FreshDb;
  readonly api: Service;
  readonly relay: Service;
}

export interface Soak {
  readonly createdPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
}

export interface GrowthRound {
  readonly seeded: number;
  readonly retention: { readonly soak: Soak; readonly soak2: Soak; readonly sizes: Sizes };
  readonly none: { readonly soak: Soak; readonly soak2: Soak; readonly sizes: Sizes };
  readonly job: JobCost;
}

/**
 * pg_total_relation_size('outbox') in bytes (heap, indexes, TOAST): seeded, after the first
 * soak, after the vacuum and second soak; and the heap alone (pg_relation_size) after each soak.
 */
export interface Sizes {
  readonly seeded: number;
  readonly afterSoak: number;
  readonly afterSecondSoak: number;
  readonly heapAfterSoak: number;
  readonly heapAfterSecondSoak: number;
}

export interface JobCost {
  readonly runs: number;
  readonly deleted: number;
  /** From the first run's start to the end of the run that found nothing left. */
  readonly seconds: number;
  /** CPU µs per row deleted: the `bun run ops` processes, and their Postgres backends. */
  readonly opsUsPerRow: number;
  readonly postgresUsPerRow: number;
  /** The VACUUM after it (autovacuum's work, done at once): its backend's CPU less the other database's, per row deleted. */
  readonly vacuumUsPerRow?: number;
}

/**
 * `vacuum outbox` on a connection of its own, without parallel workers (their CPU would be in
 * other processes): its backend's CPU seconds.
 */
async function vacuumCpuSeconds(db: FreshDb): Promise<number> {
  const conn = await db.sql.reserve();
  try {
    const [row] = await conn<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const before = ticks(row!.pid) ?? 0;
    await conn`vacuum (parallel 0) outbox`;
    const spent = ((ticks(row!.pid) ?? before) - before) / TICKS_PER_SECOND;
    await conn`alter table outbox reset (autovacuum_enabled)`;
    return spent;
  } finally {
    conn.release();
  }
}

/**
 * A day of published rows, `SEED_AGE_DAYS` back, as the relay leaves them (time-ordered ids as
 * the API makes them: uuidv7() is Postgres 18's, the embedded cluster's); then vacuumed, as a
 * table that old would be.
 */
async function seed(db: FreshDb, rows: number): Promise<void> {
  await db.sql`
    insert into outbox (id, tenant, aggregate_id, event_type, payload, created_at, published_at)
    select uuidv7(t - now()), 'tenant-a', a, 'ChargeCreated',
           json_build_object('chargeId', a, 'amountCents', 4900)::text, t, t + interval '5 milliseconds'
      from (select gen_random_uuid() as a,
                   now() - make_interval(days => ${SEED_AGE_DAYS}) + make_interval(secs => 86400.0 * i / ${rows}) as t
              from generate_series(1, ${rows}) as i) as s`;
  await db.sql`vacuum (analyze) outbox`;
  // Until the bench's own VACUUM after the first soak, so that all of the deletes' vacuum
  // work is in it and counted (autovacuum is on again for the second soak).
  await db.sql`alter table outbox set (autovacuum_enabled = off)`;
}

async function size(db: FreshDb, heapOnly = false): Promise<number> {
  const [row] = heapOnly
    ? await db.sql<{ n: string }[]>`select pg_relation_size('outbox')::text as n`
    : await db.sql<{ n: string }[]>`select pg_total_relation_size('outbox')::text as n`;
  return Number(row?.n ?? 0);
}

async function startArm(db: FreshDb): Promise<Arm> {
  const api = await startApi(db, "info");
  const relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: `bench/${db.name}/`, OUTBOX_RETENTION_SECONDS: RELAY_RETENTION_SECONDS });
  return { db, api, relay };
}

/** CPU ticks of a process so far; undefined once it is gone. */
function ticks(pid: number): number | undefined {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

/**
 * `bun run ops outbox-retention` on `db`, again and again until a run deletes nothing or
 * `until` passes. The ops backend's CPU is sampled every SAMPLE_MS while it lives: at most
 * that much of each run's last moments is missed.
 */
async function retentionLoop(db: FreshDb, until: number): Promise<JobCost> {
  const SAMPLE_MS = 50;
  const started = performance.now();
  let runs = 0, deleted = 0, opsUs = 0, backendTicks = 0;
  for (;;) {
    const proc = Bun.spawn(["bun", "ops.ts", "outbox-retention"], { cwd: ROOT, env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: "warn" }, stdout: "pipe", stderr: "inherit" });
    const seen = new Map<number, number>();
    const sampler = setInterval(() => {
      void db.sql<{ pid: number }[]>`select pid from pg_stat_activity where application_name = 'charges-ops' and datname = current_database()`.then((rows) => {
        for (const { pid } of rows) seen.set(pid, ticks(pid) ?? seen.get(pid) ?? 0);
      }, () => {});
    }, SAMPLE_MS);
    const out = await new Response(proc.stdout).text();
    await proc.exited;
    clearInterval(sampler);
    if (proc.exitCode !== 0) throw new Error(`bun run ops outbox-retention exited with ${proc.exitCode}`);
    const result = JSON.parse(out.trim().split("\n").pop() ?? "{}") as { deleted?: number };
    runs++;
    deleted += result.deleted ?? 0;
    opsUs += Number(proc.resourceUsage()?.cpuTime.total ?? 0n);
    for (const t of seen.values()) backendTicks += t;
    if (!result.deleted || performance.now() > until) break;
  }
  const perRow = (us: number) => (deleted > 0 ? us / deleted : Number.NaN);
  return { runs, deleted, seconds: (performance.now() - started) / 1000, opsUsPerRow: perRow(opsUs), postgresUsPerRow: perRow((backendTicks / TICKS_PER_SECOND) * 1e6) };
}

function soakOf(p: Paced, seconds: number): Soak {
  return { createdPerSec: p.created / seconds, p50Ms: p.latency.p50, p99Ms: p.latency.p99, errors: p.errors };
}

export async function growthRound(cluster: BenchCluster, p: GrowthParams, retentionFirst: boolean): Promise<GrowthRound> {
  const dbs = [await cluster.database("growth_a"), await cluster.database("growth_b")];
  const arms: Arm[] = [];
  try {
    for (const db of dbs) await seed(db, p.seeded);
    for (const db of dbs) arms.push(await startArm(db));
    // Which of the two gets the job alternates; so does which was started first.
    const [withJob, without] = retentionFirst ? [arms[0]!, arms[1]!] : [arms[1]!, arms[0]!];
    const seeded = [await size(withJob.db), await size(without.db)];
    const token = await tokenFor();
    const pace = (seconds: number) => openLoop([withJob.api.base, without.api.base], p.rate, seconds, token);
    await pace(WARM_UP_SECONDS);
    const soakEnds = performance.now() + p.seconds * 1000;
    const [soak, job] = await Promise.all([pace(p.seconds), retentionLoop(withJob.db, soakEnds)]);
    for (const a of arms) await untilDrained(a.db.sql, DRAIN_TIMEOUT_MS);
    const afterSoak = [await size(withJob.db), await size(without.db)];
    const heapAfterSoak = [await size(withJob.db, true), await size(without.db, true)];
    const vacuumS = [await vacuumCpuSeconds(withJob.db), await vacuumCpuSeconds(without.db)];
    const soak2 = await pace(p.seconds);
    for (const a of arms) await untilDrained(a.db.sql, DRAIN_TIMEOUT_MS);
    const afterSecond = [await size(withJob.db), await size(without.db)];
    const heapAfterSecond = [await size(withJob.db, true), await size(without.db, true)];
    const sizes = (i: number): Sizes => ({
      seeded: seeded[i]!, afterSoak: afterSoak[i]!, afterSecondSoak: afterSecond[i]!, heapAfterSoak: heapAfterSoak[i]!, heapAfterSecondSoak: heapAfterSecond[i]!,
    });
    const round: GrowthRound = {
      seeded: p.seeded,
      retention: { soak: soakOf(soak[0]!, p.seconds), soak2: soakOf(soak2[0]!, p.seconds), sizes: sizes(0) },
      none: { soak: soakOf(soak[1]!, p.seconds), soak2: soakOf(soak2[1]!, p.seconds), sizes: sizes(1) },
      job: { ...job, vacuumUsPerRow: job.deleted > 0 ? ((vacuumS[0]! - vacuumS[1]!) * 1e6) / job.deleted : Number.NaN },
    };
    log(`growth: ${describe(round)}`);
    return round;
  } finally {
    for (const a of arms) await Promise.all([a.api.child.stop(), a.relay.child.stop()]);
    for (const db of dbs) await db.drop();
  }
}

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;

function describe(r: GrowthRound): string {
  const arm = (name: string, a: GrowthRound["retention"]) =>
    `${name}: ${Math.round(a.soak.createdPerSec)} created/s p99 ${a.soak.p99Ms.toFixed(1)} ms (then ${a.soak2.p99Ms.toFixed(1)}), ` +
    `outbox ${mb(a.sizes.seeded)} → ${mb(a.sizes.afterSoak)} → ${mb(a.sizes.afterSecondSoak)} (heap ${mb(a.sizes.heapAfterSoak)} → ${mb(a.sizes.heapAfterSecondSoak)})`;
  return `${arm("with retention", r.retention)} | ${arm("without", r.none)} | job: ${r.job.deleted} rows in ${r.job.runs} runs, ${r.job.seconds.toFixed(1)} s, ` +
    `${r.job.opsUsPerRow.toFixed(1)} + ${r.job.postgresUsPerRow.toFixed(1)} µs/row (ops + its backend), vacuum ${r.job.vacuumUsPerRow?.toFixed(1) ?? "-"} µs/row`;
}

export interface GrowthParams {
  readonly rounds: number;
  readonly seconds: number;
  readonly rate: number;
  readonly seeded: number;
}

export async function outboxGrowth(p: GrowthParams): Promise<GrowthRound[]> {
  await benchServices();
  const cluster = await benchCluster();
  try {
    const rounds: GrowthRound[] = [];
    for (let i = 0; i < p.rounds; i++) rounds.push(await growthRound(cluster, p, i % 2 === 0));
    return rounds;
  } finally {
    await cluster.remove();
  }
}

/** The rows of `bun run bench`'s table. */
export function reportGrowth(report: Report, rounds: readonly GrowthRound[]): void {
  report.raw.outboxGrowth = rounds;
  const m = (f: (r: GrowthRound) => number) => median(rounds.map(f));
  report.row("outbox soak created/s, retention job running vs not (side by side)", m((r) => r.retention.soak.createdPerSec), "/s", ">= 0.95", (v) => v >= 0.95, m((r) => r.none.soak.createdPerSec), m((r) => r.retention.soak.createdPerSec / r.none.soak.createdPerSec));
  report.row("outbox soak p99, retention job running vs not", m((r) => r.retention.soak.p99Ms), "ms", "-", null, m((r) => r.none.soak.p99Ms), m((r) => r.retention.soak.p99Ms / r.none.soak.p99Ms));
  report.row("outbox retention job: rows deleted per second", m((r) => r.job.deleted / r.job.seconds), "/s", "-", null);
  report.row("outbox retention job: CPU per row deleted, ops process", m((r) => r.job.opsUsPerRow), "µs", "-", null);
  report.row("outbox retention job: CPU per row deleted, its Postgres backend", m((r) => r.job.postgresUsPerRow), "µs", "-", null);
  report.row("outbox retention: VACUUM CPU per row deleted", m((r) => r.job.vacuumUsPerRow ?? Number.NaN), "µs", "-", null);
  const growth = (a: GrowthRound["retention"]) => a.sizes.afterSecondSoak - a.sizes.afterSoak;
  report.row("outbox growth over the second soak (after vacuum), with retention vs without", m((r) => growth(r.retention) / 2 ** 20), "MB", "-", null, m((r) => growth(r.none) / 2 ** 20), null);
  for (const r of rounds) report.notes.push(`outbox growth: ${describe(r)}`);
}

/** The section of `bun run bench`, and the script run alone with its arguments. */
export async function growthSection(report: Report, p: GrowthParams): Promise<void> {
  const state = await machineState();
  report.raw.outboxGrowthMachine = state;
  report.notes.push(`outbox growth: pgbench ${Math.round(state.pgbenchTps)} tps, load average ${state.loadAverage} at the start; ${p.rounds} rounds of ${p.seconds} s at ${p.rate}/s per API, ${p.seeded} rows seeded`);
  reportGrowth(report, await outboxGrowth(p));
}

export const GROWTH_DEFAULTS: GrowthParams = { rounds: 2, seconds: 30, rate: 150, seeded: 300_000 };

if (import.meta.main) {
  const [rounds, seconds, rate, seeded] = process.argv.slice(2).map(Number);
  const d = GROWTH_DEFAULTS;
  await runAlone("outbox growth", (report) => growthSection(report, { rounds: rounds || d.rounds, seconds: seconds || d.seconds, rate: rate || d.rate, seeded: seeded || d.seeded }));
}

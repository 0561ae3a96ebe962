// Shared helpers for the benchmarks: the services (decided by testkit/services.ts), fresh
// databases, the real processes, external tools, statistics.
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { runToExit, startEntrypoint, type Service } from "../testkit/processes.ts";
import { processServices, type Services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";
import type { Sql } from "../lib/platform/db.ts";

export function benchServices(): Promise<Services> {
  return processServices("the bench");
}

/** A tool the bench shells out to is missing: reported as one line naming the package. */
export class MissingTool extends Error {
  constructor(tool: string, pkg: string) {
    super(`${tool} not found on PATH: install it with \`apt-get install -y ${pkg}\` (Debian package ${pkg})`);
  }
}

export function requireTool(tool: string, pkg: string): string {
  const path = Bun.which(tool);
  if (!path) throw new MissingTool(tool, pkg);
  return path;
}

export type FreshDb = ScratchDatabase;

/** The application_name of the bench's own pools on its fresh databases. */
export const BENCH_APP = "bench";

/**
 * A new database on the services' server, migrations applied by lib/platform/migrations.ts
 * migrate(); `migrate: false` leaves it empty for a process of another checkout to apply its
 * own (an older release refuses a database migrated by a newer one).
 */
export async function freshDatabase(label: string, max = 4, migrate = true): Promise<FreshDb> {
  const { adminDatabaseUrl } = await benchServices();
  return createScratchDatabase(adminDatabaseUrl, scratchName("bench", label), { max, applicationName: BENCH_APP, migrate });
}

/**
 * `bun api.ts` or `bun relay.ts` on `db`, ready; stdout discarded (as a production log
 * shipper would consume it).
 */
export async function startProcess(entry: "api" | "relay", db: FreshDb, env: Record<string, string> = {}, readyPath = "/readyz", cwd?: string): Promise<Service> {
  const { mqttUrl } = await benchServices();
  return startEntrypoint(entry, { env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, ...env }, readyPath, cwd });
}

/** Runs an external tool to its end; its stdout, or an error with its stderr. */
export async function run(cmd: string[], env: Record<string, string> = {}): Promise<string> {
  const { code, stdout, stderr } = await runToExit(cmd, env);
  if (code !== 0) throw new Error(`${cmd[0]} exited with ${code}: ${stderr.trim().slice(0, 800)}`);
  return stdout;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] ?? Number.NaN;
}

export function median(values: readonly number[]): number {
  const s = [...values].filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export interface Latency {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly count: number;
}

export function latencyOf(samplesMs: readonly number[]): Latency {
  const s = [...samplesMs].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? Number.NaN, count: s.length };
}

export function log(message: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}`);
}

// How often a drain benchmark asks whether the backlog is gone: the drain's end is known to
// within this (about 1% of a 50,000-row drain at 50k rows/s), at a cost of about 100 cheap
// queries a second.
const DRAIN_POLL_MS = 10;

/**
 * Resolves once no row is left to publish, with the database's clock (epoch seconds) at the
 * question that first found none: the end of a drain, the last batch's COMMIT included, late by
 * at most one poll. The question walks the pending index and stops at the first row (a count
 * over the whole outbox 100 times a second would cost Postgres a measurable share of the CPU
 * the drain being measured needs).
 */
export function untilDrained(sql: Sql, timeoutMs: number): Promise<number> {
  return waitUntil(
    async () => {
      const [row] = await sql<{ at: number; pending: number | null }[]>`
        select extract(epoch from clock_timestamp())::float8 as at,
               (select 1 from outbox where published_at is null and parked_at is null order by created_at limit 1) as pending`;
      return row && row.pending === null ? row.at : undefined;
    },
    timeoutMs,
    "the backlog to drain",
    DRAIN_POLL_MS,
  );
}

/**
 * Rows per second of a drain: `rows` over the span from the first claim of them (the earliest
 * `published_at` among `ids`: a batch's transaction start) to `drainedAt` (untilDrained). The
 * last `published_at` would leave out the publishing of every batch still in flight when the
 * last one began, which grows with the claim size.
 */
export async function drainRate(sql: Sql, ids: readonly string[], drainedAt: number): Promise<{ rowsPerSec: number; seconds: number }> {
  const [first] = await sql<{ at: number }[]>`
    select extract(epoch from min(published_at))::float8 as at from outbox where id = any(${ids as string[]}::uuid[])`;
  const seconds = Math.max(drainedAt - (first?.at ?? drainedAt), 0.001);
  return { rowsPerSec: ids.length / seconds, seconds };
}

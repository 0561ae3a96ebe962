// Operations jobs: run by the relay on an interval, and on demand with `bun run ops <job>`. Each
// runs under its own advisory lock, so among several relays (and an operator) one process at a
// time runs it; the others skip that round.
import { metrics, type Meter } from "@opentelemetry/api";
import type { Config } from "../platform/config.ts";
import { describeDbError, type Sql } from "../platform/db.ts";
import { every, type Every } from "../platform/every.ts";
import { deleteUnderJobLock, withJobLock, type Locked } from "../platform/job-lock.ts";
import type { Logger } from "../platform/log.ts";
import { keyHash } from "../platform/redact.ts";
import { completerRun } from "./completer.ts";
import { OPERATIONS } from "../charges/index.ts";
import { endpointOf } from "../idempotency/model.ts";
import { deleteExpiredTombstones, tombstoneExpiredKeys } from "../idempotency/tombstones.ts";
import {
  chargesWithoutOutbox,
  deletePublishedOutbox,
  pendingStats,
  staleStartedSample,
  staleStartedSummary,
} from "./sql.ts";

// Rows per delete statement, so each statement's locks stay short.
export const DELETE_BATCH = 1000;
// Batches per run, so one run ends (and the loop's other jobs get their turn) behind any
// backlog; a run that stopped at it is due again at once, so retention keeps up with any rate
// the deletes can, not one capped by the interval.
export const MAX_BATCHES_PER_RUN = 100;
// A STARTED key older than this is stale: no request in this service stays in flight
// that long (each is one statement bounded by the connection's timeouts).
const STALE_STARTED_SECONDS = 300;
const SAMPLE_SIZE = 20;

export const JOB_NAMES = ["key-retention", "stale-keys", "reconcile", "outbox-retention", "outbox-gauges", "completer"] as const;
export type JobName = (typeof JOB_NAMES)[number];

// Advisory lock ids, one per job: fixed numbers (never derived from the list's order, so a
// relay of another version agrees on them), next to the schema migration's 7_310_422_118_001.
export const JOB_LOCK_IDS: Readonly<Record<JobName, bigint>> = {
  "key-retention": 7_310_422_118_101n,
  "stale-keys": 7_310_422_118_102n,
  reconcile: 7_310_422_118_103n,
  "outbox-retention": 7_310_422_118_104n,
  "outbox-gauges": 7_310_422_118_105n,
  completer: 7_310_422_118_106n,
};

interface JobResult {
  readonly job: JobName;
  readonly [field: string]: unknown;
}

interface OpsGauges {
  pending: number;
  oldestPendingAgeSeconds: number;
  parked: number;
  held: number;
  chargesWithoutOutbox: number;
  staleStartedKeys: number;
  staleStartedOldestSeconds: number;
  parkedKeys: number;
  /** Per job, when this process last computed its values (ms since epoch). */
  computedAt: Partial<Record<JobName, number>>;
}

export function newGauges(): OpsGauges {
  return {
    pending: 0,
    oldestPendingAgeSeconds: 0,
    parked: 0,
    held: 0,
    chargesWithoutOutbox: 0,
    staleStartedKeys: 0,
    staleStartedOldestSeconds: 0,
    parkedKeys: 0,
    computedAt: {},
  };
}

/**
 * `{ job, skipped: true }` when another process holds the job's lock. Its statements run on
 * the connection (or in the transactions) that hold the lock (lib/platform/job-lock.ts).
 */
export async function runJob(job: JobName, sql: Sql, config: Config, gauges: OpsGauges, log: Logger, signal?: AbortSignal): Promise<JobResult> {
  const outcome = await runLocked(job, sql, config, gauges, log, signal);
  if (outcome.ran) return outcome.value;
  log.debug("ops job skipped: another process is running it", { job });
  return { job, skipped: true };
}

type ReportJob = Exclude<JobName, "key-retention" | "outbox-retention" | "completer">;

function runLocked(job: JobName, sql: Sql, config: Config, gauges: OpsGauges, log: Logger, signal?: AbortSignal): Promise<Locked<JobResult>> {
  const lockId = JOB_LOCK_IDS[job];
  const limits = { batch: DELETE_BATCH, maxBatches: MAX_BATCHES_PER_RUN };
  switch (job) {
    case "key-retention":
      return keyRetention(sql, lockId, config.idempotencyTombstoneSeconds, log, signal);
    case "outbox-retention": {
      const deleteBatch = (conn: Sql) => deletePublishedOutbox(conn, config.outboxRetentionSeconds, DELETE_BATCH);
      return logDeleted(job, "published outbox rows deleted", log, deleteUnderJobLock(sql, lockId, limits, deleteBatch, signal));
    }
    case "stale-keys":
    case "reconcile":
    case "outbox-gauges":
      return withJobLock(sql, lockId, (conn) => runReport(job, conn, config, gauges, log), signal);
    case "completer":
      return runCompleter(sql, config, gauges, log);
    default: {
      const unreachable: never = job;
      throw new Error(`bug: unknown job ${String(unreachable)}`);
    }
  }
}

async function runReport(job: ReportJob, sql: Sql, config: Config, gauges: OpsGauges, log: Logger): Promise<JobResult> {
  switch (job) {
    case "stale-keys":
      return reportStaleKeys(sql, gauges, log);
    case "reconcile": {
      const orphans = await chargesWithoutOutbox(sql, config.outboxRetentionSeconds, SAMPLE_SIZE);
      gauges.chargesWithoutOutbox = orphans.count;
      gauges.computedAt[job] = Date.now();
      if (orphans.count > 0) log.error("charges without an outbox row", { job, count: orphans.count, chargeIds: orphans.sample });
      return { job, ...orphans };
    }
    case "outbox-gauges": {
      const stats = await pendingStats(sql);
      gauges.pending = stats.pending;
      gauges.parked = stats.parked;
      gauges.held = stats.held;
      gauges.oldestPendingAgeSeconds = stats.oldestPendingAgeSeconds;
      gauges.computedAt[job] = Date.now();
      return { job, ...stats };
    }
    default: {
      const unreachable: never = job;
      throw new Error(`bug: unknown job ${String(unreachable)}`);
    }
  }
}

/**
 * Key retention: expired answers become tombstones, and tombstones past their end go, each in
 * bounded batches; a batch is a full one of either (the run goes on while either is behind).
 */
async function keyRetention(sql: Sql, lockId: bigint, tombstoneSeconds: number, log: Logger, signal?: AbortSignal): Promise<Locked<JobResult>> {
  const job: JobName = "key-retention";
  let tombstoned = 0;
  let deleted = 0;
  const batch = async (conn: Sql) => {
    const t = await tombstoneExpiredKeys(conn, tombstoneSeconds, DELETE_BATCH, locateStored);
    const d = await deleteExpiredTombstones(conn, DELETE_BATCH);
    tombstoned += t;
    deleted += d;
    return Math.max(t, d);
  };
  const run = await deleteUnderJobLock(sql, lockId, { batch: DELETE_BATCH, maxBatches: MAX_BATCHES_PER_RUN }, batch, signal);
  if (!run.ran) return run;
  const value = { job, tombstoned, deleted, batches: run.value.batches };
  if (tombstoned > 0 || deleted > 0) log.info("idempotency keys tombstoned and tombstones deleted", value);
  return { ran: true, value };
}

const OPERATION_BY_ENDPOINT = new Map(OPERATIONS.map((op) => [endpointOf(op), op]));

function locateStored(endpoint: string, status: number | null, body: string | null): string | null {
  const op = OPERATION_BY_ENDPOINT.get(endpoint);
  if (op === undefined || body === null || status !== op.status) return null;
  // A body this code cannot read (written by hand, or by another version) still gets its
  // tombstone, without a resource: retention never stops on one row.
  try {
    return op.locationOf(body) ?? null;
  } catch {
    return null;
  }
}

async function logDeleted(
  job: JobName,
  message: string,
  log: Logger,
  run: Promise<Locked<{ deleted: number; batches: number }>>,
): Promise<Locked<JobResult>> {
  const outcome = await run;
  if (!outcome.ran) return outcome;
  if (outcome.value.deleted > 0) log.info(message, { job, ...outcome.value });
  return { ran: true, value: { job, ...outcome.value } };
}

async function reportStaleKeys(sql: Sql, gauges: OpsGauges, log: Logger): Promise<JobResult> {
  const job = "stale-keys";
  const summary = await staleStartedSummary(sql, STALE_STARTED_SECONDS);
  const stale = summary.count > 0 ? await staleStartedSample(sql, STALE_STARTED_SECONDS, SAMPLE_SIZE) : [];
  // A key is a bearer of its request's identity: logs and results name it by its hash.
  const sample = stale.map(({ key, ...rest }) => ({ keyHash: keyHash(key), ...rest }));
  gauges.staleStartedKeys = summary.count;
  gauges.staleStartedOldestSeconds = summary.oldestAgeSeconds;
  gauges.computedAt[job] = Date.now();
  if (summary.count > 0) log.warn("stale STARTED idempotency keys", { job, ...summary, sample });
  return { job, ...summary, sample };
}

/** STARTED keys with an expired lease driven final, and parked keys counted for idempotency_parked_keys. */
async function runCompleter(sql: Sql, config: Config, gauges: OpsGauges, log: Logger): Promise<Locked<JobResult>> {
  const job = "completer";
  const run = await completerRun(sql, config, JOB_LOCK_IDS[job]);
  if (!run.ran) return run;
  gauges.parkedKeys = run.value.parkedNow;
  gauges.computedAt[job] = Date.now();
  const { round } = run.value;
  if (round && (round.claimed > 0 || round.parked > 0)) log.info("completer round", { job, ...round });
  if (round && round.parked > 0) log.error("idempotency keys parked: not resolved within PAYMENT_PROCESSOR_RESOLVE_WINDOW; see docs/operations.md", { job, parked: round.parked });
  return { ran: true, value: round ? { job, ...round, parkedNow: run.value.parkedNow } : { job, processor: "none", parked: run.value.parkedNow } };
}

// How often each job runs inside the relay. The gauges are cheap (partial indexes);
// reconciliation reads every charge within the outbox retention, so it runs less often.
const JOB_INTERVAL_MS: Record<JobName, number> = {
  "outbox-gauges": 5_000,
  "stale-keys": 60_000,
  reconcile: 60_000,
  "key-retention": 60_000,
  "outbox-retention": 300_000,
  // A lease outlives its holder by at most the lease; a few seconds more is nothing beside it.
  completer: 5_000,
};

// A gauge is reported while this process's last run of its job is at most this many intervals
// old: with several relays only the lock's winner has a current value, and the others report
// nothing rather than a stale one (aggregate with max()).
const FRESH_INTERVALS = 3;

function isFresh(gauges: OpsGauges, job: JobName): boolean {
  const at = gauges.computedAt[job];
  return at !== undefined && Date.now() - at <= FRESH_INTERVALS * JOB_INTERVAL_MS[job];
}

export function registerOpsGauges(gauges: OpsGauges, meter: Meter = metrics.getMeter("charges")): void {
  const gauge = (name: string, description: string, job: JobName, read: () => number) =>
    meter.createObservableGauge(name, { description }).addCallback((result) => {
      if (isFresh(gauges, job)) result.observe(read());
    });
  gauge("outbox_pending_events", "Outbox rows waiting to be published (parked rows are counted apart)", "outbox-gauges", () => gauges.pending);
  gauge("outbox_oldest_pending_age_seconds", "Age of the oldest unpublished outbox row", "outbox-gauges", () => gauges.oldestPendingAgeSeconds);
  gauge("outbox_parked_events", "Outbox rows parked after repeated or permanent failures", "outbox-gauges", () => gauges.parked);
  gauge("outbox_held_events", "Outbox rows held back behind a parked row of their aggregate (published once it is requeued)", "outbox-gauges", () => gauges.held);
  gauge("charges_without_outbox", "Charges within the outbox retention that have no outbox row", "reconcile", () => gauges.chargesWithoutOutbox);
  gauge("idempotency_stale_started_keys", "STARTED idempotency keys whose lease has expired (or, without a lease, older than 5 minutes)", "stale-keys", () => gauges.staleStartedKeys);
  gauge("idempotency_parked_keys", "STARTED keys not resolved within PAYMENT_PROCESSOR_RESOLVE_WINDOW, parked for an operator", "completer", () => gauges.parkedKeys);
  gauge(
    "idempotency_stale_started_oldest_age_seconds",
    "Age of the oldest STARTED idempotency key older than 5 minutes (0 when there is none)",
    "stale-keys",
    () => gauges.staleStartedOldestSeconds,
  );
}

/**
 * Runs every job on its interval until stop(), one job at a time, so the loop never holds
 * more than one of the pool's connections; a failing job is logged and tried again later.
 */
export function startOpsLoop(sql: Sql, config: Config, gauges: OpsGauges, log: Logger): Every {
  const nextRun = new Map<JobName, number>(JOB_NAMES.map((job) => [job, 0]));
  const runDue = async (stopping: AbortSignal): Promise<void> => {
    for (const job of JOB_NAMES) {
      if (stopping.aborted) return;
      if ((nextRun.get(job) ?? 0) > Date.now()) continue;
      const result = await runJob(job, sql, config, gauges, log, stopping).catch((error: unknown) => {
        log.warn("ops job failed", { job, error: describeDbError(error) });
        return undefined;
      });
      const backlog = result?.batches === MAX_BATCHES_PER_RUN;
      nextRun.set(job, backlog ? Date.now() : Date.now() + JOB_INTERVAL_MS[job]);
    }
  };
  return every({
    // Until the job that is due soonest; every job is due at start, so the first round comes at once.
    delayMs: () => Math.max(0, Math.min(...nextRun.values()) - Date.now()),
    runAtOnce: false,
    job: runDue,
    // Each job's failure is caught above; this is a bug in the round itself.
    onError: (error) => log.error("ops round failed", { error: describeDbError(error) }),
  });
}

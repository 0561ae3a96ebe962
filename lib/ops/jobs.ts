// Operations jobs: run by the relay on an interval, and on demand with `bun run ops <job>`. Each
// runs under its own advisory lock, so one process at a time runs it; the others skip that round.
import { metrics, type Meter } from "@opentelemetry/api";
import type { Config } from "../platform/config.ts";
import { describeDbError, type Sql } from "../platform/db.ts";
import { every, type Every } from "../platform/every.ts";
import { deleteUnderJobLock, withJobLock, type Locked } from "../platform/job-lock.ts";
import type { Logger } from "../platform/log.ts";
import { keyHash } from "../platform/redact.ts";
import { OPERATIONS, foreignOperations } from "../charges/index.ts";
import { createProcessorClient } from "../charges/processor.ts";
import { endpointOf } from "../idempotency/model.ts";
import { completeRound, parkedCount, type CompleterOptions, type CompleterRound } from "../idempotency/completer.ts";
import { leaseMsFor } from "../idempotency/drive.ts";
import { resumedCounter } from "../idempotency/metrics.ts";
import { deleteExpiredTombstones, tombstoneExpiredKeys } from "../idempotency/tombstones.ts";
import { chargesWithoutOutbox, deletePublishedOutbox, pendingStats, staleStartedSample, staleStartedSummary } from "./sql.ts";

// Rows per statement keep its locks short; batches per run let the loop's other jobs have their
// turn, and a run that stopped at the cap is due again at once, so retention keeps up with any rate.
export const DELETE_BATCH = 1000;
export const MAX_BATCHES_PER_RUN = 100;
const LIMITS = { batch: DELETE_BATCH, maxBatches: MAX_BATCHES_PER_RUN };
// No request stays in flight this long (each is one statement bounded by the connection's timeouts).
const STALE_STARTED_SECONDS = 300;
const SAMPLE_SIZE = 20;
// Keys claimed per round, driven COMPLETER_PARALLEL at a time; a run goes on while rounds come back
// full, up to COMPLETER_ROUNDS, so a backlog drains over a few runs while each run stays short.
const COMPLETER_BATCH = 50;
const COMPLETER_PARALLEL = 8;
const COMPLETER_ROUNDS = 5;

// Fixed lock ids (next to the migration's 7_310_422_118_001), so relays of other versions agree.
// The completer every 5 s: a key outlives its crashed holder by at most its lease and this.
export const JOBS = {
  "key-retention": { lockId: 7_310_422_118_101n, intervalMs: 60_000 },
  "stale-keys": { lockId: 7_310_422_118_102n, intervalMs: 60_000 },
  reconcile: { lockId: 7_310_422_118_103n, intervalMs: 60_000 },
  "outbox-retention": { lockId: 7_310_422_118_104n, intervalMs: 300_000 },
  "outbox-gauges": { lockId: 7_310_422_118_105n, intervalMs: 5_000 },
  completer: { lockId: 7_310_422_118_106n, intervalMs: 5_000 },
} as const;
export type JobName = keyof typeof JOBS;
export const JOB_NAMES = Object.keys(JOBS) as JobName[];

type JobResult = { readonly job: JobName; readonly [field: string]: unknown };

export function newGauges() {
  return {
    pending: 0,
    oldestPendingAgeSeconds: 0,
    parked: 0,
    held: 0,
    chargesWithoutOutbox: 0,
    staleStartedKeys: 0,
    staleStartedOldestSeconds: 0,
    parkedKeys: 0,
    computedAt: {} as Partial<Record<JobName, number>>,
  };
}

type OpsGauges = ReturnType<typeof newGauges>;

export async function runJob(job: JobName, sql: Sql, config: Config, gauges: OpsGauges, log: Logger, signal?: AbortSignal): Promise<JobResult> {
  const outcome = await runLocked(job, sql, config, gauges, log, signal);
  if (!outcome.ran) {
    log.debug("ops job skipped: another process is running it", { job });
    return { job, skipped: true };
  }
  gauges.computedAt[job] = Date.now();
  return outcome.value;
}

function runLocked(job: JobName, sql: Sql, config: Config, gauges: OpsGauges, log: Logger, signal?: AbortSignal): Promise<Locked<JobResult>> {
  const { lockId } = JOBS[job];
  const report = (run: (conn: Sql) => Promise<JobResult>) => withJobLock(sql, lockId, run, signal);
  switch (job) {
    case "key-retention":
      return keyRetention(sql, lockId, config.idempotencyTombstoneSeconds, log, signal);
    case "outbox-retention":
      return outboxRetention(sql, lockId, config.outboxRetentionSeconds, log, signal);
    case "stale-keys":
      return report((conn) => reportStaleKeys(conn, gauges, log));
    case "reconcile":
      return report((conn) => reconcile(conn, config.outboxRetentionSeconds, gauges, log));
    case "outbox-gauges":
      return report(async (conn) => {
        const stats = await pendingStats(conn);
        Object.assign(gauges, stats);
        return { job, ...stats };
      });
    case "completer":
      return runCompleter(sql, config, gauges, log);
  }
}

// Expired answers become tombstones, and tombstones past their end go, while either is behind.
async function keyRetention(sql: Sql, lockId: bigint, tombstoneSeconds: number, log: Logger, signal?: AbortSignal): Promise<Locked<JobResult>> {
  let tombstoned = 0;
  let deleted = 0;
  const batch = async (conn: Sql) => {
    const t = await tombstoneExpiredKeys(conn, tombstoneSeconds, DELETE_BATCH, locateStored);
    const d = await deleteExpiredTombstones(conn, DELETE_BATCH);
    tombstoned += t;
    deleted += d;
    return Math.max(t, d);
  };
  const run = await deleteUnderJobLock(sql, lockId, LIMITS, batch, signal);
  if (!run.ran) return run;
  const value = { job: "key-retention" as const, tombstoned, deleted, batches: run.value.batches };
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

async function outboxRetention(sql: Sql, lockId: bigint, retentionSeconds: number, log: Logger, signal?: AbortSignal): Promise<Locked<JobResult>> {
  const run = await deleteUnderJobLock(sql, lockId, LIMITS, (conn) => deletePublishedOutbox(conn, retentionSeconds, DELETE_BATCH), signal);
  if (!run.ran) return run;
  const value = { job: "outbox-retention" as const, ...run.value };
  if (value.deleted > 0) log.info("published outbox rows deleted", value);
  return { ran: true, value };
}

async function reportStaleKeys(sql: Sql, gauges: OpsGauges, log: Logger): Promise<JobResult> {
  const job = "stale-keys";
  const summary = await staleStartedSummary(sql, STALE_STARTED_SECONDS);
  const stale = summary.count > 0 ? await staleStartedSample(sql, STALE_STARTED_SECONDS, SAMPLE_SIZE) : [];
  // A key is a bearer of its request's identity: logs and results name it by its hash.
  const sample = stale.map(({ key, ...rest }) => ({ keyHash: keyHash(key), ...rest }));
  gauges.staleStartedKeys = summary.count;
  gauges.staleStartedOldestSeconds = summary.oldestAgeSeconds;
  if (summary.count > 0) log.warn("stale STARTED idempotency keys", { job, ...summary, sample });
  return { job, ...summary, sample };
}

async function reconcile(sql: Sql, windowSeconds: number, gauges: OpsGauges, log: Logger): Promise<JobResult> {
  const job = "reconcile";
  const orphans = await chargesWithoutOutbox(sql, windowSeconds, SAMPLE_SIZE);
  gauges.chargesWithoutOutbox = orphans.count;
  if (orphans.count > 0) log.error("charges without an outbox row", { job, count: orphans.count, chargeIds: orphans.sample });
  return { job, ...orphans };
}

// One processor client per process and configuration, made on the completer's first run.
const completerOptions = new WeakMap<Config, CompleterOptions>();

function completerOptionsOf(config: Config): CompleterOptions {
  const options = completerOptions.get(config) ?? {
    lockId: JOBS.completer.lockId,
    batch: COMPLETER_BATCH,
    parallel: COMPLETER_PARALLEL,
    resolveWindowSeconds: config.processor.resolveWindowSeconds,
    operations: foreignOperations(),
    processor: createProcessorClient(config.processor),
    leaseMs: leaseMsFor(config.processor.timeoutMs),
    onResumed: resumedCounter("completer"),
  };
  completerOptions.set(config, options);
  return options;
}

// Without a processor parked keys are only counted, so after a switch back to
// PAYMENT_PROCESSOR=none the keys it left parked stay in view.
async function runCompleter(sql: Sql, config: Config, gauges: OpsGauges, log: Logger): Promise<Locked<JobResult>> {
  const job = "completer";
  if (config.processor.mode === "none") {
    const counted = await withJobLock(sql, JOBS[job].lockId, (conn) => parkedCount(conn));
    if (!counted.ran) return counted;
    gauges.parkedKeys = counted.value;
    return { ran: true, value: { job, processor: "none", parked: counted.value } };
  }
  const options = completerOptionsOf(config);
  const first = await completeRound(sql, options);
  if (first === undefined) return { ran: false };
  const round: Record<keyof CompleterRound, number> = { ...first };
  for (let rounds = 1, last = first; rounds < COMPLETER_ROUNDS && last.claimed === COMPLETER_BATCH; rounds++) {
    const next = await completeRound(sql, options);
    if (next === undefined) break;
    for (const field of Object.keys(round) as (keyof CompleterRound)[]) round[field] += next[field];
    last = next;
  }
  gauges.parkedKeys = await parkedCount(sql);
  if (round.claimed > 0 || round.parked > 0) log.info("completer round", { job, ...round });
  if (round.parked > 0) log.error("idempotency keys parked: not resolved within PAYMENT_PROCESSOR_RESOLVE_WINDOW; see docs/operations.md", { job, parked: round.parked });
  return { ran: true, value: { job, ...round, parkedNow: gauges.parkedKeys } };
}

// With several relays only the lock's winner has a current value: a gauge is reported while this
// process's last run of its job is at most this many intervals old (aggregate with max()).
const FRESH_INTERVALS = 3;

export function registerOpsGauges(gauges: OpsGauges, meter: Meter = metrics.getMeter("charges")): void {
  const gauge = (name: string, description: string, job: JobName, read: () => number) =>
    meter.createObservableGauge(name, { description }).addCallback((result) => {
      const at = gauges.computedAt[job];
      const fresh = at !== undefined && Date.now() - at <= FRESH_INTERVALS * JOBS[job].intervalMs;
      if (fresh) result.observe(read());
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

/** Every job on its interval until stop(), one at a time, so the loop holds one pool connection at most. */
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
      nextRun.set(job, backlog ? Date.now() : Date.now() + JOBS[job].intervalMs);
    }
  };
  return every({
    // Until the job due soonest; every job is due at start, so the first round comes at once.
    delayMs: () => Math.max(0, Math.min(...nextRun.values()) - Date.now()),
    runAtOnce: false,
    job: runDue,
    // Each job's failure is caught above; this is a bug in the round itself.
    onError: (error) => log.error("ops round failed", { error: describeDbError(error) }),
  });
}

// Operations jobs: run by the relay on an interval, and on demand with `bun run ops <job>`.
import { metrics, type Meter } from "@opentelemetry/api";
import type { Config } from "../shared/config.ts";
import { describeDbError, type Sql } from "../shared/db.ts";
import type { Logger } from "../shared/log.ts";
import { chargesWithoutOutbox, deleteExpiredKeys, deletePublishedOutbox, pendingStats, staleStartedKeys } from "./sql.ts";

// Rows per delete statement: small enough that each statement's locks last milliseconds.
export const DELETE_BATCH = 1000;
// Upper bound of batches per run, so one run ends even behind a huge backlog; the next
// interval continues where it stopped.
export const MAX_BATCHES_PER_RUN = 100;
// A STARTED key older than this is stale: no request in this service stays in flight
// that long (each is one statement bounded by the connection's timeouts).
export const STALE_STARTED_SECONDS = 300;
// How many ids a report names in its log line.
export const SAMPLE_SIZE = 20;

export const JOB_NAMES = ["key-retention", "stale-keys", "reconcile", "outbox-retention", "outbox-gauges"] as const;
export type JobName = (typeof JOB_NAMES)[number];

export interface JobResult {
  readonly job: JobName;
  readonly [field: string]: unknown;
}

export interface OpsGauges {
  pending: number;
  oldestPendingAgeSeconds: number;
  parked: number;
  chargesWithoutOutbox: number;
  staleStartedKeys: number;
  staleStartedOldestSeconds: number;
}

export function newGauges(): OpsGauges {
  return { pending: 0, oldestPendingAgeSeconds: 0, parked: 0, chargesWithoutOutbox: 0, staleStartedKeys: 0, staleStartedOldestSeconds: 0 };
}

async function deleteInBatches(run: () => Promise<number>): Promise<{ deleted: number; batches: number }> {
  let deleted = 0;
  let batches = 0;
  while (batches < MAX_BATCHES_PER_RUN) {
    const n = await run();
    batches++;
    deleted += n;
    if (n < DELETE_BATCH) break;
  }
  return { deleted, batches };
}

export async function runJob(job: JobName, sql: Sql, config: Config, gauges: OpsGauges, log: Logger): Promise<JobResult> {
  switch (job) {
    case "key-retention": {
      const r = await deleteInBatches(() => deleteExpiredKeys(sql, DELETE_BATCH));
      if (r.deleted > 0) log.info("expired idempotency keys deleted", { job, ...r });
      return { job, ...r };
    }
    case "outbox-retention": {
      const r = await deleteInBatches(() => deletePublishedOutbox(sql, config.outboxRetentionSeconds, DELETE_BATCH));
      if (r.deleted > 0) log.info("published outbox rows deleted", { job, ...r });
      return { job, ...r };
    }
    case "stale-keys": {
      const stale = await staleStartedKeys(sql, STALE_STARTED_SECONDS, SAMPLE_SIZE);
      gauges.staleStartedKeys = stale.count;
      gauges.staleStartedOldestSeconds = stale.oldestAgeSeconds;
      if (stale.count > 0) log.warn("stale STARTED idempotency keys", { job, ...stale });
      return { job, ...stale };
    }
    case "reconcile": {
      const orphans = await chargesWithoutOutbox(sql, config.outboxRetentionSeconds, SAMPLE_SIZE);
      gauges.chargesWithoutOutbox = orphans.count;
      if (orphans.count > 0) log.error("charges without an outbox row", { job, count: orphans.count, chargeIds: orphans.sample });
      return { job, ...orphans };
    }
    case "outbox-gauges": {
      const stats = await pendingStats(sql);
      gauges.pending = stats.pending;
      gauges.parked = stats.parked;
      gauges.oldestPendingAgeSeconds = stats.oldestPendingAgeSeconds;
      return { job, ...stats };
    }
    default: {
      const unreachable: never = job;
      throw new Error(`bug: unknown job ${String(unreachable)}`);
    }
  }
}

/** Observable gauges over the values the jobs last computed. */
export function registerOpsGauges(gauges: OpsGauges, meter: Meter = metrics.getMeter("charges")): void {
  const gauge = (name: string, description: string, read: () => number) =>
    meter.createObservableGauge(name, { description }).addCallback((result) => result.observe(read()));
  gauge("outbox_pending_events", "Outbox rows waiting to be published (parked rows are counted apart)", () => gauges.pending);
  gauge("outbox_oldest_pending_age_seconds", "Age of the oldest unpublished outbox row", () => gauges.oldestPendingAgeSeconds);
  gauge("outbox_parked_events", "Outbox rows parked after repeated or permanent failures", () => gauges.parked);
  gauge("charges_without_outbox", "Charges within the outbox retention that have no outbox row", () => gauges.chargesWithoutOutbox);
  gauge("idempotency_stale_started_keys", "STARTED idempotency keys older than 5 minutes", () => gauges.staleStartedKeys);
}

// How often each job runs inside the relay. The gauges are cheap (the partial index);
// reconciliation scans recent charges, so it runs less often.
export const JOB_INTERVAL_MS: Record<JobName, number> = {
  "outbox-gauges": 5_000,
  "stale-keys": 60_000,
  reconcile: 60_000,
  "key-retention": 60_000,
  "outbox-retention": 300_000,
};

export interface OpsLoop {
  stop(): Promise<void>;
}

/** Runs every job on its interval until stop(); a failing job is logged and tried again later. */
export function startOpsLoop(sql: Sql, config: Config, gauges: OpsGauges, log: Logger): OpsLoop {
  const timers = new Map<JobName, ReturnType<typeof setTimeout>>();
  const running = new Set<Promise<unknown>>();
  let stopped = false;
  const schedule = (job: JobName, delayMs: number) => {
    if (stopped) return;
    timers.set(
      job,
      setTimeout(() => {
        const run = runJob(job, sql, config, gauges, log)
          .catch((error: unknown) => log.warn("ops job failed", { job, error: describeDbError(error) }))
          .finally(() => {
            running.delete(run);
            schedule(job, JOB_INTERVAL_MS[job]);
          });
        running.add(run);
      }, delayMs),
    );
  };
  for (const job of JOB_NAMES) schedule(job, 0);
  return {
    async stop() {
      stopped = true;
      for (const timer of timers.values()) clearTimeout(timer);
      await Promise.all(running);
    },
  };
}

// What the server (start.ts) and the edge worker (worker.ts) build alike: a pool with the API's time
// bounds, the idempotency core behind one pool gate, the line a failed relay wake-up logs.
import type { Config } from "../platform/config.ts";
import { createSql, describeDbError, openConnections, type Sql } from "../platform/db.ts";
import type { Logger } from "../platform/log.ts";
import { createPoolGate } from "../platform/pool-gate.ts";
import { createIdempotencyCore, type ForeignOptions, type IdempotencyCore } from "../idempotency/run.ts";
import type { ApiMetrics } from "./metrics.ts";
import { leaseMsFor } from "../idempotency/drive.ts";
import { resumedCounter } from "../idempotency/metrics.ts";
import { createProcessorClient } from "../charges/processor.ts";

export const API_POOL_NAME = "charges-api";

export function apiSql(config: Config, max: number, applicationName: string, singleUse = false): Sql {
  const bounds = config.apiTimeBounds;
  return createSql(config.databaseUrl, {
    max,
    applicationName,
    statementTimeoutMs: bounds.statementTimeoutMs,
    lockTimeoutMs: bounds.lockTimeoutMs,
    singleUse,
    countOpen: !singleUse,
    pooler: config.databasePooler,
  });
}

// Rows in one processor-phase statement at most: a busy API in a few statements, each short.
const FOREIGN_MAX_BATCH = 64;

/** At most `poolSize` requests at once behind one pool gate, batched beyond API_CHARGE_STATEMENTS. */
export function boundedCore(config: Config, sql: Sql, poolSize: number, onCreated: () => void, metrics?: ApiMetrics, listen?: (onNotify: () => void) => Promise<unknown>): IdempotencyCore {
  const { poolWaitMs, requestTimeoutMs, statementTimeoutMs } = config.apiTimeBounds;
  const gate = createPoolGate({ size: poolSize, waitMs: poolWaitMs, requestTimeoutMs, statementTimeoutMs });
  // With as many statements allowed as connections, every request has its own: nothing to batch.
  const batching = config.apiChargeStatements < poolSize ? { maxInFlight: config.apiChargeStatements, maxBatch: poolSize, statementTimeoutMs } : undefined;
  // Each gate slot in use holds a connection: the pool's busy ones, without postgres.js's internals.
  metrics?.observePool({ name: API_POOL_NAME, max: poolSize, busy: () => gate.inUse, open: () => openConnections(sql) ?? 0 });
  const core = createIdempotencyCore(sql, {
    ttlSeconds: config.idempotencyTtlSeconds,
    onCreated,
    bounds: gate,
    batching,
    settings: { defaultCurrency: config.processor.defaultCurrency },
    foreign: processorOptions(config),
    // The foreign statements grouped alike; their batches unbounded by the pool (queued requests hold no slot).
    groupCommit: { maxInFlight: Math.min(config.apiChargeStatements, poolSize), maxBatch: FOREIGN_MAX_BATCH, statementTimeoutMs },
    listen,
  });
  if (batching || config.processor.mode !== "none") metrics?.observeStatements(core.statements);
  return core;
}

// One processor client per configuration: the edge worker builds a core per request.
const processors = new WeakMap<Config, ForeignOptions>();

function processorOptions(config: Config): ForeignOptions | undefined {
  if (config.processor.mode === "none") return undefined;
  let options = processors.get(config);
  if (options === undefined) {
    options = { processor: createProcessorClient(config.processor), leaseMs: leaseMsFor(config.processor.timeoutMs), onResumed: resumedCounter("request") };
    processors.set(config, options);
  }
  return options;
}

export function logNotifyFailure(log: Logger): (error: unknown) => void {
  return (error) => log.warn("outbox notify failed; the relay's poll will find the row", { error: describeDbError(error) });
}

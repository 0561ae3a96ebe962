// The outbox relay's loop: idle until a NOTIFY, reconnect or poll; draining until a claim is short;
// waiting-for-broker claims nothing (no attempts burnt); backing-off after a database error; stopping.
import { describeDbError, type Sql } from "../platform/db.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import { silentLogger, type Logger } from "../platform/log.ts";
import { createMovingRate } from "../platform/moving-rate.ts";
import type { RetryPolicy } from "./outbox-sql.ts";
import { deliverVia, type Broker, type PublishFn } from "./publisher.ts";
import { IN_TURN_MAX, startBatch, type BatchContext, type BatchRun } from "./batch.ts";
import type { BatchResult } from "./outcome.ts";
import { createBatchTurn, type BatchTurn } from "./claim-lock.ts";
import { createClaimSizer, drain, laneCount, type ClaimSizer } from "./lanes.ts";
import { listenForOutbox, type OutboxListener } from "../platform/wakeup.ts";
import { UNPACED, type GcPacer } from "../platform/gc-pacer.ts";

export { laneCount } from "./lanes.ts";

export type RelayState = "idle" | "draining" | "waiting-for-broker" | "backing-off" | "stopping" | "stopped";

/** Called after the batch committed; destination = the topic. */
export interface RelayEvents {
  onPublished?(destination: string, lagSeconds: readonly number[]): void;
  onPublishError?(destination: string, count: number): void;
}

export interface RelayOptions {
  readonly sql: Sql;
  /** Where the relay LISTENs: `sql` when unset; null for nowhere (then only the poll wakes it). */
  readonly listenSql?: Sql | null;
  readonly broker: Broker;
  readonly batchSize: number;
  readonly pollMs: number;
  readonly topicPrefix: string;
  /** Replaces broker.publish, for tests. */
  readonly publish?: PublishFn;
  readonly events?: RelayEvents;
  readonly logger?: Logger;
  readonly publishTimeoutMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  readonly lanes?: number;
  readonly pacer?: GcPacer;
  readonly gatherMs?: number;
}

// Long enough for a broker restart to resend, short enough not to hold row locks (and SIGTERM) long.
const PUBLISH_TIMEOUT_MS = 10_000;
// Parked after 10 attempts, backing off 1 s doubling to 5 min: by then it needs an operator.
const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 10, baseSeconds: 1, maxSeconds: 300 };
const DB_BACKOFF_MIN_MS = 100;
const DB_BACKOFF_MAX_MS = 5000;
// The poll covers the gap.
const LISTEN_RETRY_MS = 2000;

// A NOTIFY, a broker reconnect or stop() ends a pause; a wake while busy is kept for after the
// drain. A sleep (a gather) sleeps through the NOTIFYs it is there to gather: only stop() ends it.
export function createWaker() {
  let pending = false;
  let closed = false;
  const waiters = new Set<() => void>();
  const sleepers = new Set<() => void>();
  const wake = (): void => {
    pending = true;
    for (const waiter of waiters) waiter();
  };
  const wait = (ending: Set<() => void>, ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        ending.delete(done);
        resolve();
      }
      ending.add(done);
      if (closed) done();
    });
  return {
    wake,
    pause: (ms: number): Promise<void> => wait(waiters, ms),
    sleep: (ms: number): Promise<void> => wait(sleepers, ms),
    /** Whether a wake arrived since the last take(). */
    take(): boolean {
      const was = pending;
      pending = false;
      return was;
    },
    close(): void {
      closed = true;
      wake();
      for (const sleeper of sleepers) sleeper();
    },
  };
}

// Past this rate a claim per NOTIFY costs more CPU than its few rows: the next drain waits to gather.
export const GATHER_MIN_RATE_PER_S = 400;
// Past this a claim's fixed cost is small beside its rows'.
const GATHER_ROWS = 200;
// The rate's time constant: rows that committed together must not read as a busy stream.
const RATE_WINDOW_MS = 100;
// A stream that sped up during the gather still comes in one claim (a short claim ends the drain).
const CLAIM_MARGIN = 1.5;

/** `maxMs` (RELAY_GATHER_MS): the longest an event waits to be gathered; 0 gathers nothing. */
export function createGather(maxMs: number) {
  const rate = createMovingRate(RATE_WINDOW_MS);
  let began = 0;
  return {
    /** A drain that began at `at` claimed `claimed`: when the next may start (`at` when at once). */
    drained(at: number, claimed: number): number {
      rate.add(claimed, at);
      began = at;
      const perMs = rate.perMs(at);
      if (maxMs <= 0 || perMs * 1000 < GATHER_MIN_RATE_PER_S) return at;
      return at + Math.min(maxMs, GATHER_ROWS / perMs);
    },
    /** The claim for the rows due by `at`: at the last drain's rate, never small enough to go in turn. */
    expected(at: number): number {
      return Math.max(IN_TURN_MAX + 1, Math.ceil(rate.perMs(began) * Math.max(0, at - began) * CLAIM_MARGIN));
    },
  };
}

function logBatch(logger: Logger, result: BatchResult, ms: number): void {
  if (result.claimed === 0) return;
  const failed = [...result.errors.values()].reduce((a, b) => a + b, 0);
  const fields = { claimed: result.claimed, published: result.published, failed, durationMs: Math.round(ms * 10) / 10 };
  if (failed > 0) logger.warn("batch had failures", fields);
  else logger.info("batch", fields);
}

interface RelayRun {
  readonly options: RelayOptions;
  readonly logger: Logger;
  readonly stopping: AbortController;
  readonly waker: ReturnType<typeof createWaker>;
  readonly gather: ReturnType<typeof createGather>;
  readonly sizer: ClaimSizer;
  readonly batches: Set<Promise<unknown>>;
  state: RelayState;
  listening: boolean;
}

function setState(run: RelayRun, next: RelayState): void {
  if (next === run.state) return;
  run.state = next;
  run.logger.debug("relay state", { state: next });
}

function batchContext(options: RelayOptions): BatchContext {
  return {
    sql: options.sql,
    maxClaim: options.batchSize,
    topicPrefix: options.topicPrefix,
    deliver: options.publish ? deliverVia(options.publish) : options.broker.deliver,
    broker: options.broker,
    publishTimeoutMs: options.publishTimeoutMs ?? PUBLISH_TIMEOUT_MS,
    retry: { ...DEFAULT_RETRY, ...options.retry },
    pacer: options.pacer ?? UNPACED,
  };
}

function trackedBatch(run: RelayRun, ctx: BatchContext, turn: BatchTurn, limit: number): BatchRun {
  const { events = {} } = run.options;
  const started = performance.now();
  const batch = startBatch(ctx, turn, limit);
  const result = batch.result.then((r) => {
    for (const [topic, lags] of r.lags) events.onPublished?.(topic, lags);
    for (const [topic, count] of r.errors) events.onPublishError?.(topic, count);
    logBatch(run.logger, r, performance.now() - started);
    return r;
  });
  const forget = (): void => void run.batches.delete(result);
  run.batches.add(result);
  result.then(forget, forget);
  return { claimed: batch.claimed, result };
}

async function listenUntilStopped(run: RelayRun): Promise<OutboxListener | undefined> {
  const sql = run.options.listenSql === undefined ? run.options.sql : run.options.listenSql;
  while (sql !== null && !run.stopping.signal.aborted) {
    try {
      const listener = await listenForOutbox(sql, run.waker.wake);
      run.listening = true;
      return listener;
    } catch (error) {
      run.logger.warn("LISTEN failed; polling meanwhile", { error: describeDbError(error) });
      await run.waker.pause(LISTEN_RETRY_MS);
    }
  }
  return undefined;
}

/** On a busy stream, waits out the gather; returns whether it did. */
async function gatherAfter(run: RelayRun, began: number, rows: number): Promise<boolean> {
  const next = run.gather.drained(began, rows);
  if (next <= began) return false;
  const wait = next - performance.now();
  run.logger.debug("gathering", { sinceDrainBeganMs: Math.round(next - began), waitMs: Math.max(0, Math.round(wait)) });
  if (wait > 0) await run.waker.sleep(wait);
  run.sizer.expect(run.gather.expected(performance.now()));
  return true;
}

async function loopUntilStopped(run: RelayRun, drainOnce: () => Promise<number>): Promise<void> {
  const { broker, pollMs } = run.options;
  const { waker, stopping } = run;
  const listenerReady = listenUntilStopped(run);
  const unsubscribe = broker.onConnectionChange((connected) => connected && waker.wake());
  let backoff = DB_BACKOFF_MIN_MS;
  while (!stopping.signal.aborted) {
    if (!broker.connected) {
      setState(run, "waiting-for-broker");
      await waker.pause(pollMs);
      continue;
    }
    setState(run, "draining");
    waker.take();
    const began = performance.now();
    let gathered: boolean;
    try {
      const rows = await drainOnce();
      backoff = DB_BACKOFF_MIN_MS;
      gathered = await gatherAfter(run, began, rows);
    } catch (error) {
      setState(run, "backing-off");
      run.logger.warn("batch failed; backing off", { retryInMs: backoff, error: describeDbError(error) });
      // A server gone read-only (a failover): the next batch must find the one that writes.
      if (isReadOnly(error)) void dropReadOnlyConnections(run.options.sql);
      await waker.pause(backoff);
      backoff = Math.min(DB_BACKOFF_MAX_MS, backoff * 2);
      continue;
    }
    if (waker.take() || gathered || stopping.signal.aborted) continue;
    setState(run, "idle");
    await waker.pause(pollMs);
  }
  unsubscribe();
  const listener = await listenerReady;
  run.listening = false;
  await listener?.unlisten().catch(() => {});
}

export type Relay = ReturnType<typeof createRelay>;

export function createRelay(options: RelayOptions) {
  const ctx = batchContext(options);
  const maxLanes = options.lanes ?? laneCount(options.batchSize);
  const run: RelayRun = {
    options,
    logger: options.logger ?? silentLogger,
    stopping: new AbortController(),
    waker: createWaker(),
    gather: createGather(options.gatherMs ?? 0),
    sizer: createClaimSizer(options.batchSize, ctx.publishTimeoutMs, maxLanes),
    batches: new Set(),
    state: "idle",
    listening: false,
  };
  const turn = createBatchTurn(run.stopping.signal);
  const batch = (limit: number): BatchRun => trackedBatch(run, ctx, turn, limit);
  let loop: Promise<void> | undefined;
  return {
    get state(): RelayState {
      return run.state;
    },
    get listening(): boolean {
      return run.listening;
    },
    async runOnce(): Promise<number> {
      return (await batch(options.batchSize).result).published;
    },
    run(): Promise<void> {
      loop ??= loopUntilStopped(run, () => drain({ maxLanes, sizer: run.sizer, stop: run.stopping.signal, startBatch: batch }));
      return loop;
    },
    /** No new claims; waits for the batches in flight and the loop. */
    async stop(): Promise<void> {
      run.stopping.abort();
      setState(run, "stopping");
      run.waker.close();
      await loop;
      await Promise.allSettled([...run.batches]);
      setState(run, "stopped");
    },
    wake: run.waker.wake,
  };
}

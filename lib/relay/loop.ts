// The outbox relay's loop. States:
//   idle               nothing due; waits for a NOTIFY, a broker reconnect or the fallback poll
//   draining           lanes claim and publish batches until a claim comes back short (lanes.ts)
//   waiting-for-broker disconnected: claims nothing (no attempts burnt) until the CONNACK
//   backing-off        the database failed; waits, doubling the pause, then drains again
//   stopping/stopped   stop(): no new claim; batches in flight finish (PUBACKs awaited, rows marked)
// Claims are serialized in-process (claim + hand-off under one lock, claim-lock.ts), so
// within a relay the publish order follows created_at.
import type { Sql } from "../shared/db.ts";
import { describeDbError } from "../shared/db.ts";
import { silentLogger, type Logger } from "../shared/log.ts";
import type { RetryPolicy } from "./outbox-sql.ts";
import type { Broker, PublishFn } from "./publisher.ts";
import { startBatch, type BatchContext, type BatchRun, type BatchTurn } from "./batch.ts";
import type { BatchResult } from "./outcome.ts";
import { createClaimLock } from "./claim-lock.ts";
import { createClaimSizer, drain, laneCount, type ClaimSizer } from "./lanes.ts";
import { createWaker, type Waker } from "./wake.ts";
import { listenForOutbox, type OutboxListener } from "../shared/wakeup.ts";

export { laneCount } from "./lanes.ts";

export type RelayState = "idle" | "draining" | "waiting-for-broker" | "backing-off" | "stopping" | "stopped";

/** Hooks for metrics; destination = the topic. Called after the batch committed. */
export interface RelayEvents {
  onPublished?(destination: string, lagSeconds: readonly number[]): void;
  onPublishError?(destination: string, count: number): void;
}

export interface RelayOptions {
  readonly sql: Sql;
  readonly broker: Broker;
  /** The largest claim (OUTBOX_BATCH_SIZE); a drain starts smaller and grows while claims come back full. */
  readonly batchSize: number;
  readonly pollMs: number;
  readonly topicPrefix: string;
  /** Replaces broker.publish: the one allowed fake, for tests. */
  readonly publish?: PublishFn;
  readonly events?: RelayEvents;
  readonly logger?: Logger;
  readonly publishTimeoutMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  /** Concurrent batches; default laneCount(batchSize). */
  readonly lanes?: number;
}

export interface Relay {
  readonly state: RelayState;
  /** LISTEN is in place: a NOTIFY now wakes the relay. */
  readonly listening: boolean;
  /** Claims one batch of up to batchSize rows, publishes it, marks it; returns the rows published. */
  runOnce(): Promise<number>;
  /** The loop; resolves after stop(). */
  run(): Promise<void>;
  /** No new claims; waits for the batches in flight to settle and the loop to end. */
  stop(): Promise<void>;
  /** Something may be due: drain now. */
  wake(): void;
}

// A PUBACK not back in this time counts as a failed attempt (or a release when the broker is
// gone). Long enough for a broker restart to resend the in-flight publishes; short enough that
// a batch does not hold its row locks (and SIGTERM) for long.
const PUBLISH_TIMEOUT_MS = 10_000;
// A failing row is retried after 1 s, 2 s, 4 s ... up to 5 min, and parked after 10 attempts
// (about 17 minutes of failures): by then it needs an operator, and it must not hold up others.
const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 10, baseSeconds: 1, maxSeconds: 300 };
// After a database error the loop pauses this long, doubling up to the maximum.
const DB_BACKOFF_MIN_MS = 100;
const DB_BACKOFF_MAX_MS = 5000;
// A LISTEN that could not be set up (database away at start) is retried this often; the
// fallback poll covers the gap.
const LISTEN_RETRY_MS = 2000;

// One line per batch that claimed something (an empty poll is not news), at warn when
// some of its rows failed.
function logBatch(logger: Logger, result: BatchResult, ms: number): void {
  if (result.claimed === 0) return;
  const failed = [...result.errors.values()].reduce((a, b) => a + b, 0);
  const fields = { claimed: result.claimed, published: result.published, failed, durationMs: Math.round(ms * 10) / 10 };
  if (failed > 0) logger.warn("batch had failures", fields);
  else logger.info("batch", fields);
}

export function createRelay(options: RelayOptions): Relay {
  const { batchSize, logger = silentLogger } = options;
  const stopping = new AbortController();
  const waker = createWaker();
  const status = new RelayStatus(logger);
  const turn: BatchTurn = { lock: createClaimLock(), stop: stopping.signal };
  const batches = new BatchTracker(batchContext(options), turn, options.events ?? {}, logger);
  const deps: LoopDeps = {
    sql: options.sql,
    broker: options.broker,
    pollMs: options.pollMs,
    logger,
    maxLanes: options.lanes ?? laneCount(batchSize),
    sizer: createClaimSizer(batchSize),
    stop: stopping.signal,
    waker,
    status,
    batches,
  };
  let loop: Promise<void> | undefined;

  return {
    get state() {
      return status.state;
    },
    get listening() {
      return status.listening;
    },
    async runOnce() {
      return (await batches.start(batchSize).result).published;
    },
    run() {
      loop ??= loopUntilStopped(deps);
      return loop;
    },
    async stop() {
      stopping.abort();
      status.set("stopping");
      waker.close();
      await loop;
      await batches.settled();
      status.set("stopped");
    },
    wake: waker.wake,
  };
}

function batchContext(options: RelayOptions): BatchContext {
  return {
    sql: options.sql,
    maxClaim: options.batchSize,
    topicPrefix: options.topicPrefix,
    publish: options.publish ?? options.broker.publish,
    broker: options.broker,
    publishTimeoutMs: options.publishTimeoutMs ?? PUBLISH_TIMEOUT_MS,
    retry: { ...DEFAULT_RETRY, ...options.retry },
  };
}

/** The relay's state (logged on every change) and whether LISTEN is in place. */
class RelayStatus {
  state: RelayState = "idle";
  listening = false;

  constructor(private readonly logger: Logger) {}

  set(next: RelayState): void {
    if (next === this.state) return;
    this.state = next;
    this.logger.debug("relay state", { state: next });
  }
}

/** Starts batches, reports each (metrics, log line) once committed and tracks it until then, for stop(). */
class BatchTracker {
  private readonly running = new Set<Promise<unknown>>();

  constructor(
    private readonly ctx: BatchContext,
    private readonly turn: BatchTurn,
    private readonly events: RelayEvents,
    private readonly logger: Logger,
  ) {}

  readonly start = (limit: number): BatchRun => {
    const started = performance.now();
    const run = startBatch(this.ctx, this.turn, limit);
    const result = run.result.then((r) => {
      for (const [topic, lags] of r.lags) this.events.onPublished?.(topic, lags);
      for (const [topic, count] of r.errors) this.events.onPublishError?.(topic, count);
      logBatch(this.logger, r, performance.now() - started);
      return r;
    });
    const forget = (): void => void this.running.delete(result);
    this.running.add(result);
    result.then(forget, forget);
    return { claimed: run.claimed, result };
  };

  /** Resolves once every batch started so far has settled. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }
}

/** What the loop works with: the options plus the pieces createRelay assembled. */
interface LoopDeps {
  readonly sql: Sql;
  readonly broker: Broker;
  readonly pollMs: number;
  readonly logger: Logger;
  readonly maxLanes: number;
  readonly sizer: ClaimSizer;
  readonly stop: AbortSignal;
  readonly waker: Waker;
  readonly status: RelayStatus;
  readonly batches: BatchTracker;
}

async function loopUntilStopped(deps: LoopDeps): Promise<void> {
  const listenerReady = listenWithRetry(deps);
  const unsubscribe = deps.broker.onConnectionChange((connected) => connected && deps.waker.wake());
  const backoff = new DbBackoff();
  while (!deps.stop.aborted) await step(deps, backoff);
  unsubscribe();
  const listener = await listenerReady;
  deps.status.listening = false;
  await listener?.unlisten().catch(() => {});
}

/** One turn of the loop: wait for the broker, or drain, then back off after a failure or idle. */
async function step(deps: LoopDeps, backoff: DbBackoff): Promise<void> {
  const { waker, status } = deps;
  if (!deps.broker.connected) {
    status.set("waiting-for-broker");
    await waker.pause(deps.pollMs);
    return;
  }
  status.set("draining");
  waker.take();
  try {
    await drain({ maxLanes: deps.maxLanes, sizer: deps.sizer, stop: deps.stop, startBatch: deps.batches.start });
    backoff.reset();
  } catch (error) {
    status.set("backing-off");
    deps.logger.warn("batch failed; backing off", { retryInMs: backoff.ms, error: describeDbError(error) });
    await waker.pause(backoff.ms);
    backoff.grow();
    return;
  }
  if (waker.take() || deps.stop.aborted) return;
  status.set("idle");
  await waker.pause(deps.pollMs);
}

/** The pause after a database error: DB_BACKOFF_MIN_MS, doubling up to DB_BACKOFF_MAX_MS. */
class DbBackoff {
  ms = DB_BACKOFF_MIN_MS;

  grow(): void {
    this.ms = Math.min(DB_BACKOFF_MAX_MS, this.ms * 2);
  }

  reset(): void {
    this.ms = DB_BACKOFF_MIN_MS;
  }
}

/** LISTEN, retried until it is in place or the relay stops; the fallback poll covers the gap. */
async function listenWithRetry(deps: LoopDeps): Promise<OutboxListener | undefined> {
  while (!deps.stop.aborted) {
    try {
      const listener = await listenForOutbox(deps.sql, deps.waker.wake);
      deps.status.listening = true;
      return listener;
    } catch (error) {
      deps.logger.warn("LISTEN failed; polling meanwhile", { error: describeDbError(error) });
      await deps.waker.pause(LISTEN_RETRY_MS);
    }
  }
  return undefined;
}

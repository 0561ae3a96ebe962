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
import { createClaimSizer, drain, laneCount } from "./lanes.ts";
import { createWaker } from "./wake.ts";
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
  const { sql, broker, batchSize, pollMs, events = {}, logger = silentLogger } = options;
  const maxLanes = options.lanes ?? laneCount(batchSize);
  const stopping = new AbortController();
  const waker = createWaker();
  const batches = new Set<Promise<unknown>>();
  let state: RelayState = "idle";
  let listening = false;
  let loop: Promise<void> | undefined;

  const ctx: BatchContext = {
    sql,
    maxClaim: batchSize,
    topicPrefix: options.topicPrefix,
    publish: options.publish ?? broker.publish,
    broker,
    publishTimeoutMs: options.publishTimeoutMs ?? PUBLISH_TIMEOUT_MS,
    retry: { ...DEFAULT_RETRY, ...options.retry },
  };
  const turn: BatchTurn = { lock: createClaimLock(), stop: stopping.signal };
  const sizer = createClaimSizer(batchSize);

  const setState = (next: RelayState): void => {
    if (next === state) return;
    state = next;
    logger.debug("relay state", { state: next });
  };

  /** One batch, reported (metrics, log line) once committed and tracked until then, for stop(). */
  function batch(limit: number): BatchRun {
    const started = performance.now();
    const run = startBatch(ctx, turn, limit);
    const result = run.result.then((r) => {
      for (const [topic, lags] of r.lags) events.onPublished?.(topic, lags);
      for (const [topic, count] of r.errors) events.onPublishError?.(topic, count);
      logBatch(logger, r, performance.now() - started);
      return r;
    });
    const forget = (): void => void batches.delete(result);
    batches.add(result);
    result.then(forget, forget);
    return { claimed: run.claimed, result };
  }

  async function startListening(): Promise<OutboxListener | undefined> {
    while (!stopping.signal.aborted) {
      try {
        const listener = await listenForOutbox(sql, waker.wake);
        listening = true;
        return listener;
      } catch (error) {
        logger.warn("LISTEN failed; polling meanwhile", { error: describeDbError(error) });
        await waker.pause(LISTEN_RETRY_MS);
      }
    }
    return undefined;
  }

  async function loopUntilStopped(): Promise<void> {
    const listenerReady = startListening();
    const unsubscribe = broker.onConnectionChange((connected) => connected && waker.wake());
    let backoff = DB_BACKOFF_MIN_MS;
    while (!stopping.signal.aborted) {
      if (!broker.connected) {
        setState("waiting-for-broker");
        await waker.pause(pollMs);
        continue;
      }
      setState("draining");
      waker.take();
      try {
        await drain({ maxLanes, sizer, stop: stopping.signal, startBatch: batch });
        backoff = DB_BACKOFF_MIN_MS;
      } catch (error) {
        setState("backing-off");
        logger.warn("batch failed; backing off", { retryInMs: backoff, error: describeDbError(error) });
        await waker.pause(backoff);
        backoff = Math.min(DB_BACKOFF_MAX_MS, backoff * 2);
        continue;
      }
      if (waker.take() || stopping.signal.aborted) continue;
      setState("idle");
      await waker.pause(pollMs);
    }
    unsubscribe();
    const listener = await listenerReady;
    listening = false;
    await listener?.unlisten().catch(() => {});
  }

  return {
    get state() {
      return state;
    },
    get listening() {
      return listening;
    },
    async runOnce() {
      return (await batch(batchSize).result).published;
    },
    run() {
      loop ??= loopUntilStopped();
      return loop;
    },
    async stop() {
      stopping.abort();
      setState("stopping");
      waker.close();
      await loop;
      await Promise.allSettled([...batches]);
      setState("stopped");
    },
    wake: waker.wake,
  };
}

// The outbox relay's loop. States:
//   idle               nothing due; waits for a NOTIFY, a broker reconnect or the fallback poll
//   draining           lanes claim and publish batches until a claim comes back short
//   waiting-for-broker disconnected: claims nothing (no attempts burnt) until the CONNACK
//   backing-off        the database failed; waits, doubling the pause, then drains again
//   stopping/stopped   stop(): no new claim; batches in flight finish (PUBACKs awaited, rows marked)
// A drain starts with one lane; every full claim starts another, up to the lane limit, so
// a single row costs one transaction while a backlog gets several batches in flight at
// once, each in its own transaction. Claims are serialized in-process (claim + hand-off
// under one lock), so within a relay the publish order follows created_at.
import type { Sql } from "../shared/db.ts";
import { describeDbError } from "../shared/db.ts";
import { silentLogger, type Logger } from "../shared/log.ts";
import type { RetryPolicy } from "./outbox-sql.ts";
import type { Broker, PublishFn } from "./publisher.ts";
import { runBatch, type BatchContext, type BatchResult } from "./batch.ts";
import { listenForOutbox, type OutboxListener } from "../shared/wakeup.ts";

export type RelayState = "idle" | "draining" | "waiting-for-broker" | "backing-off" | "stopping" | "stopped";

/** Hooks for metrics and logs; destination = the topic. Called after the batch committed. */
export interface RelayEvents {
  onPublished?(destination: string, lagSeconds: readonly number[]): void;
  onPublishError?(destination: string, count: number): void;
  onStateChange?(state: RelayState): void;
}

export interface RelayOptions {
  readonly sql: Sql;
  readonly broker: Broker;
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
  /** Claims one batch, publishes it, marks it; returns the rows published. */
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
export const PUBLISH_TIMEOUT_MS = 10_000;
// A failing row is retried after 1 s, 2 s, 4 s ... up to 5 min, and parked after 10 attempts
// (about 17 minutes of failures): by then it needs an operator, and it must not hold up others.
export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 10, baseSeconds: 1, maxSeconds: 300 };
// After a database error the loop pauses this long, doubling up to the maximum.
const DB_BACKOFF_MIN_MS = 100;
const DB_BACKOFF_MAX_MS = 5000;
// A LISTEN that could not be set up (database away at start) is retried this often; the
// fallback poll covers the gap.
const LISTEN_RETRY_MS = 2000;

// Rows claimed and not yet settled over all lanes. Measured with bench/relay-drain.ts on 2
// cores: past about 200, more lanes only make every claim skip more locked rows, Postgres's
// CPU per row grows and the drain slows down (batch 50: 4 lanes ~21k rows/s, 8 lanes ~17k).
export const MAX_CLAIMED_ROWS = 200;
// At least two, so one batch's claim overlaps another's wait for PUBACKs; at most eight, as
// each lane holds a database connection for the length of its batch.
const MIN_LANES = 2;
const MAX_LANES = 8;

/** Concurrent batches for a batch size (the relay's pool needs one connection per lane). */
export function laneCount(batchSize: number): number {
  return Math.min(MAX_LANES, Math.max(MIN_LANES, Math.floor(MAX_CLAIMED_ROWS / batchSize)));
}

export function createRelay(options: RelayOptions): Relay {
  const { sql, broker, batchSize, pollMs, events = {}, logger = silentLogger } = options;
  const maxLanes = options.lanes ?? laneCount(batchSize);
  let state: RelayState = "idle";
  let stopping = false;
  let wakePending = false;
  const wakeWaiters = new Set<() => void>();
  let loop: Promise<void> | undefined;
  const batches = new Set<Promise<BatchResult>>();

  let claimChain: Promise<unknown> = Promise.resolve();
  const claimLock = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = claimChain.then(fn);
    claimChain = run.catch(() => {});
    return run;
  };

  const ctx: BatchContext = {
    sql,
    batchSize,
    topicPrefix: options.topicPrefix,
    publish: options.publish ?? broker.publish,
    brokerConnected: () => broker.connected,
    publishTimeoutMs: options.publishTimeoutMs ?? PUBLISH_TIMEOUT_MS,
    retry: { ...DEFAULT_RETRY, ...options.retry },
    claimLock,
    mayClaim: () => !stopping,
  };

  const setState = (next: RelayState): void => {
    if (next === state) return;
    state = next;
    logger.debug("relay state", { state: next });
    events.onStateChange?.(next);
  };

  const wake = (): void => {
    wakePending = true;
    for (const waiter of wakeWaiters) waiter();
  };
  /** Resolves on wake(), stop() or after ms. */
  const pause = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        wakeWaiters.delete(done);
        resolve();
      }
      wakeWaiters.add(done);
      if (stopping) done();
    });

  // One line per batch that claimed something (an empty poll is not news), at warn when
  // some of its rows failed.
  const logBatch = (result: BatchResult, ms: number): void => {
    if (result.claimed === 0) return;
    const failed = [...result.errors.values()].reduce((a, b) => a + b, 0);
    const fields = { claimed: result.claimed, published: result.published, failed, durationMs: Math.round(ms * 10) / 10 };
    if (failed > 0) logger.warn("batch had failures", fields);
    else logger.info("batch", fields);
  };

  async function batch(onClaimed?: (count: number) => void): Promise<BatchResult> {
    const started = performance.now();
    const running = runBatch(ctx, onClaimed);
    batches.add(running);
    try {
      const result = await running;
      for (const [topic, lags] of result.lags) events.onPublished?.(topic, lags);
      for (const [topic, count] of result.errors) events.onPublishError?.(topic, count);
      logBatch(result, performance.now() - started);
      return result;
    } finally {
      batches.delete(running);
    }
  }

  /** Lanes until a claim comes back short; rejects with the first lane's error. */
  function drain(): Promise<void> {
    return new Promise((resolve, reject) => {
      let lanes = 0;
      let failure: unknown;
      const spawn = (): void => {
        lanes += 1;
        lane().then(
          () => {},
          (error: unknown) => void (failure ??= error),
        ).finally(() => {
          lanes -= 1;
          if (lanes > 0) return;
          if (failure === undefined) resolve();
          else reject(failure);
        });
      };
      const lane = async (): Promise<void> => {
        // A full claim means more may be due: start another lane right away, while this one awaits its PUBACKs.
        const onClaimed = (count: number): void => {
          if (count === batchSize && lanes < maxLanes && failure === undefined && !stopping) spawn();
        };
        while (!stopping && failure === undefined) {
          const result = await batch(onClaimed);
          if (result.claimed < batchSize) return;
        }
      };
      spawn();
    });
  }

  let listening = false;
  async function startListening(): Promise<OutboxListener | undefined> {
    while (!stopping) {
      try {
        const listener = await listenForOutbox(sql, wake);
        listening = true;
        return listener;
      } catch (error) {
        logger.warn("LISTEN failed; polling meanwhile", { error: describeDbError(error) });
        await pause(LISTEN_RETRY_MS);
      }
    }
    return undefined;
  }

  async function loopUntilStopped(): Promise<void> {
    const listenerReady = startListening();
    const unsubscribe = broker.onConnectionChange((connected) => connected && wake());
    let backoff = DB_BACKOFF_MIN_MS;
    while (!stopping) {
      if (!broker.connected) {
        setState("waiting-for-broker");
        await pause(pollMs);
        continue;
      }
      setState("draining");
      wakePending = false;
      try {
        await drain();
        backoff = DB_BACKOFF_MIN_MS;
      } catch (error) {
        setState("backing-off");
        logger.warn("batch failed; backing off", { retryInMs: backoff, error: describeDbError(error) });
        await pause(backoff);
        backoff = Math.min(DB_BACKOFF_MAX_MS, backoff * 2);
        continue;
      }
      if (wakePending || stopping) continue;
      setState("idle");
      await pause(pollMs);
    }
    unsubscribe();
    wake(); // ends a pending LISTEN retry pause
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
      return (await batch()).published;
    },
    run() {
      loop ??= loopUntilStopped();
      return loop;
    },
    async stop() {
      stopping = true;
      setState("stopping");
      wake();
      await loop;
      await Promise.allSettled([...batches]);
      setState("stopped");
    },
    wake,
  };
}

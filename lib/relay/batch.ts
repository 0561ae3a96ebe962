// One batch of the relay: in one transaction, claim due rows (FOR UPDATE SKIP LOCKED),
// hand them all to the publisher, await the PUBACKs (bounded by a timeout), then one
// UPDATE for the acknowledged rows and one for the failed ones, and commit. The row locks
// keep every other relay off the batch until it is settled; a crash anywhere before the
// commit leaves every row pending, so the worst case is a second delivery, never a loss.
import { isConnectionLost, type Sql, type Tx } from "../shared/db.ts";
import { claimBatch, claimInIndexOrder, markPublished, recordFailures, type Failure, type OutboxRow, type RetryPolicy } from "./outbox-sql.ts";
import { describeMqttError, reasonCodeOf } from "../shared/mqtt-errors.ts";
import type { OutboundMessage, PublishFn } from "./publisher.ts";
import { buildEnvelope, isPublishableType, topicOf, userPropertiesOf } from "../events.ts";

// PUBACK reason codes that will fail the same way however often the row is retried; such a
// row is parked at once for an operator (0x87 not authorized, 0x90 topic name invalid,
// 0x95 packet too large, 0x99 payload format invalid, 0x9A retain / 0x9B QoS not supported).
export const NEVER_SUCCEEDS = new Set([0x87, 0x90, 0x95, 0x99, 0x9a, 0x9b]);

export type Outcome =
  | { readonly kind: "acked"; readonly at: number }
  // Counts an attempt and backs off (park: right away, the retry cannot help).
  | { readonly kind: "failed"; readonly error: string; readonly park: boolean }
  // The broker went away: the row goes back untouched, no attempt counted.
  | { readonly kind: "released"; readonly error: string };

export interface BatchContext {
  readonly sql: Sql;
  readonly batchSize: number;
  readonly topicPrefix: string;
  readonly publish: PublishFn;
  readonly brokerConnected: () => boolean;
  readonly publishTimeoutMs: number;
  readonly retry: RetryPolicy;
  /** Serializes claim + hand-off across lanes, so publish order follows created_at. */
  readonly claimLock: <T>(fn: () => Promise<T>) => Promise<T>;
  /** False once the relay is stopping: no new claim. */
  readonly mayClaim: () => boolean;
}

export interface BatchResult {
  readonly claimed: number;
  readonly published: number;
  /** Per destination topic: delivery lags (seconds, row created → PUBACK) and failures. */
  readonly lags: Map<string, number[]>;
  readonly errors: Map<string, number>;
}

/** The wire form of a row, or why it can never be published. */
export function messageOf(prefix: string, row: OutboxRow): OutboundMessage | string {
  if (!isPublishableType(row.eventType)) return `event_type ${JSON.stringify(row.eventType)} makes an invalid topic`;
  let data: unknown;
  try {
    data = JSON.parse(row.payload);
  } catch {
    return "payload is not valid JSON";
  }
  return {
    topic: topicOf(prefix, row.eventType),
    payload: buildEnvelope({ id: row.id, type: row.eventType, aggregateId: row.aggregateId, createdAt: row.createdAt, data }),
    userProperties: userPropertiesOf(row.id, row.eventType, row.traceparent),
  };
}

function classify(error: unknown, brokerConnected: boolean): Outcome {
  const code = reasonCodeOf(error);
  const description = describeMqttError(error);
  if (code !== undefined && NEVER_SUCCEEDS.has(code)) return { kind: "failed", error: description, park: true };
  if (!brokerConnected) return { kind: "released", error: description };
  return { kind: "failed", error: description, park: false };
}

function publishRow(ctx: BatchContext, row: OutboxRow): Promise<Outcome> {
  const message = messageOf(ctx.topicPrefix, row);
  if (typeof message === "string") return Promise.resolve({ kind: "failed", error: message, park: true });
  try {
    return ctx.publish(message).then(
      (): Outcome => ({ kind: "acked", at: Date.now() }),
      (error: unknown) => classify(error, ctx.brokerConnected()),
    );
  } catch (error) {
    return Promise.resolve(classify(error, ctx.brokerConnected()));
  }
}

/** Waits for every outcome, or until the timeout; a row still unanswered then has timed out. */
async function settle(ctx: BatchContext, pending: Promise<Outcome>[]): Promise<Outcome[]> {
  const outcomes: (Outcome | undefined)[] = new Array(pending.length);
  pending.forEach((p, i) => void p.then((o) => (outcomes[i] = o)));
  await within(Promise.all(pending).then(() => {}), ctx.publishTimeoutMs);
  const timeout = `no PUBACK within ${ctx.publishTimeoutMs} ms`;
  return outcomes.map((o) => o ?? classify(new Error(timeout), ctx.brokerConnected()));
}

/**
 * One publish at a time, each awaiting its PUBACK. For a short claim (the backlog is drained):
 * Mosquitto, by default without TCP_NODELAY, answers a burst of PUBLISHes with one PUBACK
 * segment and holds the next until ours is acknowledged, and a client that has nothing more
 * to send acknowledges only after its delayed-ACK timer: 40 ms per burst, which is most of the
 * commit → subscriber latency at 200 events/s. One at a time, each PUBLISH acknowledges the
 * previous PUBACK; it costs a local round trip (~0.1 ms) per row, only when few rows are due.
 * After a timeout or a lost connection the rest of the batch is released without an attempt.
 */
async function publishInTurn(ctx: BatchContext, rows: OutboxRow[]): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (const row of rows) {
    const outcome = await settle(ctx, [publishRow(ctx, row)]);
    outcomes.push(...outcome);
    if (outcome[0]?.kind === "acked" || (outcome[0]?.kind === "failed" && ctx.brokerConnected())) continue;
    const rest: Outcome = { kind: "released", error: "not attempted: the broker went away during the batch" };
    while (outcomes.length < rows.length) outcomes.push(rest);
    break;
  }
  return outcomes;
}

function add<V>(map: Map<string, V[]>, key: string, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Sorts the outcomes into the batch's result and the two updates (not yet sent). */
function tally(ctx: BatchContext, rows: OutboxRow[], outcomes: Outcome[]): { result: BatchResult; acked: string[]; failures: Failure[] } {
  const acked: string[] = [];
  const failures: Failure[] = [];
  const lags = new Map<string, number[]>();
  const errors = new Map<string, number>();
  rows.forEach((row, i) => {
    const outcome = outcomes[i];
    const topic = topicOf(ctx.topicPrefix, row.eventType);
    if (outcome?.kind === "acked") {
      acked.push(row.id);
      add(lags, topic, Math.max(0, (outcome.at - Date.parse(row.createdAt)) / 1000));
      return;
    }
    errors.set(topic, (errors.get(topic) ?? 0) + 1);
    if (outcome?.kind === "failed") failures.push({ id: row.id, error: outcome.error, park: outcome.park });
  });
  return { result: { claimed: rows.length, published: acked.length, lags, errors }, acked, failures };
}

const EMPTY: BatchResult = { claimed: 0, published: 0, lags: new Map(), errors: new Map() };


// How long a statement that failed with a connection-level error waits for postgres.js to
// confirm the connection closed (that follows the error within milliseconds); unconfirmed, the
// connection is alive and the error is thrown. It happens: postgres.js 3.4.9 keeps a FATAL
// 57P01 from a killed connection and hands it to the first query after the reconnect.
const CLOSE_CONFIRM_MS = 1000;

/** Never settles; what awaits it is dropped with it (nothing else references it). */
const forever = (): Promise<never> => new Promise<never>(() => {});

/**
 * Runs one batch in a transaction. `onClaimed` hears the claim size as soon as the rows are
 * handed to the publisher, so the caller can start another lane while this one awaits its
 * PUBACKs. Round trips: BEGIN, claim, the updates (pipelined), COMMIT.
 *
 * postgres.js 3.4.9 (issues #1154, #1208) throws an uncatchable TypeError when a statement
 * is sent on a connection that has closed: our next statement, or its own ROLLBACK/COMMIT
 * after the callback ends. sql.begin() rejects as soon as its connection closes; from then
 * on the callback never sends or settles again (it is left pending and collected), so
 * postgres.js never touches the dead connection, and the pool opens a fresh one.
 */
export async function runBatch(ctx: BatchContext, onClaimed: (count: number) => void = () => {}): Promise<BatchResult> {
  let lost = false;
  let confirmLost: () => void = () => {};
  const closed = new Promise<void>((resolve) => (confirmLost = resolve));
  const transaction = ctx.sql.begin(async (tx) => {
    try {
      return await batchInTx(ctx, tx, onClaimed, () => lost);
    } catch (error) {
      if (isConnectionLost(error)) await within(closed, CLOSE_CONFIRM_MS);
      if (lost) await forever();
      throw error; // the connection is alive: postgres.js rolls back
    }
  });
  transaction.catch(() => {
    lost = true;
    confirmLost();
  });
  return transaction;
}

/** Resolves when `promise` does or after `ms`, whichever comes first. */
async function within(promise: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

async function batchInTx(
  ctx: BatchContext,
  tx: Tx,
  onClaimed: (count: number) => void,
  lost: () => boolean,
): Promise<BatchResult> {
  const stopIfLost = async (): Promise<void> => {
    if (lost()) await forever();
  };
  const claimed = await ctx.claimLock(async () => {
    // Checked under the lock: no claim while the broker is away (no attempts burnt) or stopping.
    // (Never parked while holding the lock: the other lanes wait on it.)
    if (!ctx.mayClaim() || !ctx.brokerConnected() || lost()) return undefined;
    // Both statements leave in one write (pipelined): one round trip.
    const [, rows] = await Promise.all([claimInIndexOrder(tx), claimBatch(tx, ctx.batchSize)]);
    // Either way every row is handed to the broker before the next claim, so the publish
    // order follows created_at. A full claim goes out at once (throughput); a short one in
    // turn (latency, see publishInTurn), still under the lock.
    if (rows.length === ctx.batchSize) return { rows, outcomes: settle(ctx, rows.map((row) => publishRow(ctx, row))) };
    return { rows, outcomes: Promise.resolve(await publishInTurn(ctx, rows)) };
  });
  onClaimed(claimed?.rows.length ?? 0);
  if (!claimed || claimed.rows.length === 0) {
    await stopIfLost();
    return EMPTY;
  }
  const outcomes = await claimed.outcomes;
  const { result, acked, failures } = tally(ctx, claimed.rows, outcomes);
  await stopIfLost();
  // Both updates leave in one write (pipelined); postgres.js sends COMMIT after them.
  await Promise.all([markPublished(tx, acked), recordFailures(tx, failures, ctx.retry)]);
  await stopIfLost();
  return result;
}

// One batch of the relay: in one transaction, claim due rows (FOR UPDATE SKIP LOCKED),
// hand them all to the publisher, await the PUBACKs (bounded by a timeout), then one
// UPDATE each for the acknowledged, the failed and the suspect rows, and commit. The row
// locks keep every other relay off the batch until it is settled; a crash anywhere before
// the commit leaves every row pending, so the worst case is a second delivery, never a loss.
import type { Sql, Tx } from "../shared/db.ts";
import { transaction } from "../shared/tx.ts";
import { within } from "../shared/within.ts";
import { claimBatch, batchSettings, markPublished, recordFailures, recordReleases, type OutboxRow, type RetryPolicy } from "./outbox-sql.ts";
import type { DeliverFn } from "./publisher.ts";
import type { GcPacer } from "../shared/gc-pacer.ts";
import type { OutboundMessage } from "./window.ts";
import { buildEnvelope, isPublishableType, topicOf, userPropertiesOf } from "../events.ts";
import type { ClaimFrontier, ClaimLock } from "./claim-lock.ts";
import { classify, EMPTY_RESULT, tally, type BatchResult, type Outcome } from "./outcome.ts";

export interface BatchContext {
  readonly sql: Sql;
  /** The largest claim (OUTBOX_BATCH_SIZE). */
  readonly maxClaim: number;
  readonly topicPrefix: string;
  readonly deliver: DeliverFn;
  readonly broker: { readonly connected: boolean };
  readonly publishTimeoutMs: number;
  readonly retry: RetryPolicy;
  /** Told of each row answered. */
  readonly pacer: GcPacer;
}

/** What a lane holds while its batch runs. */
export interface BatchTurn {
  /** Serializes claim + hand-off across the relay's lanes, so publish order follows created_at. */
  readonly lock: ClaimLock;
  /** Where the next claim starts. */
  readonly frontier: ClaimFrontier;
  /** Aborted once the relay is stopping: no new claim. */
  readonly stop: AbortSignal;
}

export interface BatchRun {
  /** The rows claimed, known as soon as they are handed to the publisher (0 when none or failed). */
  readonly claimed: Promise<number>;
  /** The settled batch, after its commit. */
  readonly result: Promise<BatchResult>;
}

/**
 * A row as the window sends it. The envelope, the topic and the user properties are built
 * when the window encodes the PUBLISH, not when the row is handed over: a drain's rows wait
 * behind the other lanes' for up to a few hundred milliseconds, across several young
 * collections (lib/shared/gc-pacer.ts), and what they hold then is promoted to the old
 * generation, whose collections free it tens of megabytes at a time for the allocator to hand
 * back to the kernel. Built at the send, these strings die young: more rows/s, less CPU per
 * row and a lower peak memory than built at hand-over (bench/README.md, "Relay drain").
 */
class RowMessage implements OutboundMessage {
  constructor(
    private readonly prefix: string,
    private readonly row: OutboxRow,
    private readonly data: unknown,
  ) {}
  get key(): string {
    return this.row.aggregateId;
  }
  get topic(): string {
    return topicOf(this.prefix, this.row.eventType, this.row.aggregateType);
  }
  get payload(): string {
    const { id, eventType: type, aggregateId, tenant: tenantId, createdAt, sequence } = this.row;
    return buildEnvelope({ id, type, aggregateId, tenantId, createdAt, sequence, data: this.data });
  }
  get userProperties(): Record<string, string> {
    const { id, eventType: type, tenant: tenantId, sequence, traceparent } = this.row;
    return userPropertiesOf({ id, type, tenantId, sequence, traceparent });
  }
}

/** The wire form of a row, or why it can never be published (checked at hand-over). */
function messageOf(prefix: string, row: OutboxRow): OutboundMessage | string {
  if (!isPublishableType(row.eventType)) return `event_type ${JSON.stringify(row.eventType)} makes an invalid topic`;
  let data: unknown;
  try {
    data = JSON.parse(row.payload);
  } catch {
    return "payload is not valid JSON";
  }
  return new RowMessage(prefix, row, data);
}

/** Hands one row to the broker; `answer` gets its outcome (at once when it cannot be published). */
function publishRow(ctx: BatchContext, row: OutboxRow, answer: (outcome: Outcome) => void): void {
  const message = messageOf(ctx.topicPrefix, row);
  if (typeof message === "string") return answer({ kind: "failed", error: message, park: true });
  try {
    ctx.deliver(message, (error) => answer(error === undefined ? { kind: "acked", at: Date.now() } : classify(error, ctx.broker.connected)));
  } catch (error) {
    answer(classify(error, ctx.broker.connected));
  }
}

/**
 * Hands the rows to the broker in order and waits for every outcome, or until the timeout; a
 * row still unanswered then has timed out. Callbacks rather than a promise per row (and its
 * reactions): a drain hands over tens of thousands of rows a second.
 */
async function publishAll(ctx: BatchContext, rows: readonly OutboxRow[]): Promise<Outcome[]> {
  const outcomes: (Outcome | undefined)[] = new Array(rows.length);
  let left = rows.length;
  let allIn: () => void = () => {};
  const all = new Promise<void>((resolve) => (allIn = resolve));
  rows.forEach((row, i) =>
    publishRow(ctx, row, (outcome) => {
      outcomes[i] = outcome;
      ctx.pacer.count(1);
      if (--left === 0) allIn();
    }),
  );
  if (left === 0) allIn();
  await within(all, ctx.publishTimeoutMs);
  const timeout = `no PUBACK within ${ctx.publishTimeoutMs} ms`;
  return Array.from(outcomes, (o) => o ?? classify(new Error(timeout), ctx.broker.connected));
}

/**
 * One publish at a time, each awaiting its PUBACK. For a small claim (the backlog is drained):
 * Mosquitto, by default without TCP_NODELAY, answers a burst of PUBLISHes with one PUBACK
 * segment and holds the next until ours is acknowledged, and a client that has nothing more
 * to send acknowledges only after its delayed-ACK timer (40 ms on Linux) per burst, which would
 * be most of the commit → subscriber latency at low rates. One at a time, each PUBLISH
 * acknowledges the previous PUBACK; it costs a local round trip per row, only when few rows are due.
 * After a timeout or a lost connection the rest of the batch is released without an attempt.
 */
// Claims of up to this many rows are published in turn. Whether the claim came back full does
// not matter: an adaptive claim of 10 or 20 rows is full as soon as the relay falls a little
// behind (a loaded machine), and a burst would then add the 40 ms stall to every claim, which
// makes it fall further behind (a claim of the whole OUTBOX_BATCH_SIZE, when that is 50 or
// less, still goes out at once: the backlog is not drained). Past about 50 rows, a local round
// trip per row costs more than the one stall of a burst (bench/README.md, "Relay drain").
const IN_TURN_MAX = 50;

async function publishInTurn(ctx: BatchContext, rows: OutboxRow[]): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (const row of rows) {
    const [outcome] = await publishAll(ctx, [row]);
    if (outcome) outcomes.push(outcome);
    if (outcome?.kind === "acked" || (outcome?.kind === "failed" && ctx.broker.connected)) continue;
    const rest: Outcome = { kind: "released", error: "not attempted: the broker went away during the batch" };
    while (outcomes.length < rows.length) outcomes.push(rest);
    break;
  }
  return outcomes;
}

/** Never settles; what awaits it is dropped with it (nothing else references it). */
const forever = (): Promise<never> => new Promise<never>(() => {});

/**
 * Starts one batch in a transaction. Round trips: BEGIN, claim, the updates (pipelined), COMMIT.
 * The transaction never touches a connection that closed under it (lib/shared/tx.ts): once
 * lost, the batch stops before its next statement and is left pending, and the pool opens a
 * fresh connection for the next one.
 */
export function startBatch(ctx: BatchContext, turn: BatchTurn, limit: number): BatchRun {
  let handOff: (count: number) => void = () => {};
  const claimed = new Promise<number>((resolve) => (handOff = resolve));
  const result = transaction(ctx.sql, (tx, lost) => batchInTx(ctx, turn, limit, tx, handOff, lost));
  // A batch that failed before its claim claimed nothing.
  result.then(
    () => handOff(0),
    () => handOff(0),
  );
  return { claimed, result };
}

async function batchInTx(
  ctx: BatchContext,
  turn: BatchTurn,
  limit: number,
  tx: Tx,
  handOff: (count: number) => void,
  lost: () => boolean,
): Promise<BatchResult> {
  const stopIfLost = async (): Promise<void> => {
    if (lost()) await forever();
  };
  const claimed = await turn.lock.hold(async () => {
    // Checked under the lock: no claim while the broker is away (no attempts burnt) or stopping.
    // (Never parked while holding the lock: the other lanes wait on it.)
    if (turn.stop.aborted || !ctx.broker.connected || lost()) return undefined;
    // Both statements leave in one write (pipelined): one round trip.
    const from = turn.frontier.from(performance.now());
    const [, rows] = await Promise.all([batchSettings(tx), claimBatch(tx, limit, from)]);
    turn.frontier.claimed(limit, rows.length, rows.at(-1)?.createdAt);
    const since = performance.now();
    const fromTop = from === undefined;
    // Either way every row is handed to the broker before the next claim, so the publish
    // order follows created_at. A large claim goes out at once (throughput); a small one in
    // turn (latency, see publishInTurn), still under the lock.
    if (rows.length > IN_TURN_MAX || rows.length === ctx.maxClaim) return { rows, since, fromTop, outcomes: publishAll(ctx, rows) };
    return { rows, since, fromTop, outcomes: Promise.resolve(await publishInTurn(ctx, rows)) };
  });
  handOff(claimed?.rows.length ?? 0);
  if (!claimed || claimed.rows.length === 0) {
    await stopIfLost();
    return claimed?.fromTop === false ? { ...EMPTY_RESULT, fromTop: false } : EMPTY_RESULT;
  }
  const outcomes = await claimed.outcomes;
  const answeredMs = performance.now() - claimed.since;
  const { result, acked, failures, releases } = tally(ctx.topicPrefix, claimed.rows, outcomes);
  await stopIfLost();
  // The updates leave in one write (pipelined); postgres.js sends COMMIT after them.
  await Promise.all([markPublished(tx, acked), recordFailures(tx, failures, ctx.retry), recordReleases(tx, releases)]);
  await stopIfLost();
  return { ...result, answeredMs, fromTop: claimed.fromTop };
}

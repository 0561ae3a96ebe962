// One batch of the relay, in one transaction: claim due rows (SKIP LOCKED), hand them to the
// publisher, await the PUBACKs (bounded by a timeout), one UPDATE per kind of outcome, commit.
// A crash before the commit leaves every row pending: a second delivery at worst, never a loss.
import type { Sql, Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { claimFollowers, claimHeads, claimHeadsUnbounded, batchSettings, markPublished, recordFailures, recordReleases, type OutboxRow, type RetryPolicy } from "./outbox-sql.ts";
import type { DeliverFn } from "./publisher.ts";
import type { GcPacer } from "../platform/gc-pacer.ts";
import type { BatchTurn } from "./claim-lock.ts";
import { EMPTY_RESULT, tally, type BatchResult, type Outcome } from "./outcome.ts";
import { chainsOf, publishChains, publishInTurn } from "./handover.ts";

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

/** What a claim took; `full`: its window held as many due rows as it asked for (more may be due). */
interface Claimed {
  readonly rows: number;
  readonly full: boolean;
}

const NOTHING: Claimed = { rows: 0, full: false };

export interface BatchRun {
  /** Known once the rows are handed to the publisher (NOTHING when none or failed). */
  readonly claimed: Promise<Claimed>;
  /** The settled batch, after its commit. */
  readonly result: Promise<BatchResult>;
}

// Claims that asked for up to this many rows (and not the whole OUTBOX_BATCH_SIZE) are published
// in turn (handover.ts publishInTurn): for a few rows a round trip each costs less than the
// broker's delayed-PUBACK stall on a burst. Past it the outbox is busy and a claim goes at once.
export const IN_TURN_MAX = 50;

const LEFT_FOR_LATER: Outcome = { kind: "released", error: "not attempted: a row before it in its aggregate was not in the claim" };

/** The claim's rows in the order they are handed over, and their outcomes to come in that order. */
function handOver(ctx: BatchContext, limit: number, claimed: readonly OutboxRow[], heads: number): { rows: OutboxRow[]; outcomes: Promise<Outcome[]>; inTurn: boolean } {
  const { chains, left } = chainsOf(claimed, heads);
  const rows = [...chains.flat(), ...left];
  const leftOutcomes = left.map(() => LEFT_FOR_LATER);
  const inTurn = !(limit > IN_TURN_MAX || claimed.length === ctx.maxClaim);
  const outcomes = (inTurn ? publishInTurn(ctx, chains) : publishChains(ctx, chains)).then((o) => [...o, ...leftOutcomes]);
  return { rows, outcomes, inTurn };
}

/** The claimed heads created at `end` (the last of them, in created_at order). */
function atEnd(heads: readonly OutboxRow[], end: string | undefined): number {
  let n = 0;
  for (let i = heads.length - 1; i >= 0 && heads[i]?.createdAt === end; i--) n++;
  return n;
}

/**
 * The claim, under the claim lock: the heads of a window of due rows (pipelined with the
 * settings: one round trip) and, with room left, their followers (one more).
 */
async function claim(turn: BatchTurn, limit: number, tx: Tx): Promise<{ rows: OutboxRow[]; heads: number; full: boolean; fromTop: boolean }> {
  const from = turn.frontier.from(performance.now());
  const headLimit = turn.heads.of(limit);
  // The window walks past the rows this relay holds locked, so they are added to it: from the
  // frontier, the last claim's rows at its end (else a backlog's windows all come back short);
  // from the top, all the rows in flight (else a small window finds none behind the other lanes').
  const walk = turn.window.of(limit) + (from === undefined ? turn.window.held : turn.frontier.overlap);
  // The claim from the top, at least once a second, walks a window again.
  const unbounded = from !== undefined && turn.window.unbounded;
  const [, { heads, window }] = await Promise.all([batchSettings(tx), unbounded ? claimHeadsUnbounded(tx, headLimit, from) : claimHeads(tx, headLimit, from, walk)]);
  if (!unbounded && window.end !== undefined) turn.window.claimed(walk, window.firstEvents, heads.length);
  // The next claim starts at the last head when the walk stopped at the head limit, else at the window's end.
  const stopped = heads.length === headLimit;
  const full = stopped || window.end !== undefined;
  const end = stopped ? heads.at(-1)?.createdAt : window.end;
  turn.frontier.claimed(limit, full ? limit : heads.length, end, atEnd(heads, end));
  // No follower to look for (no room, or every row of the window a head or of sequence 1):
  // no round trip. A follower past the window waits to be a head.
  const more = heads.length < limit && window.rows > heads.length;
  const room = more && window.rows > window.firstEvents;
  const followers = room ? await claimFollowers(tx, heads, limit - heads.length) : [];
  // Told even of none found, so claims after a backlog of chains take full claims of heads again.
  if (more) turn.heads.claimed(limit, heads.length, followers.length);
  turn.window.walked(full && window.rows === window.firstEvents && followers.length === 0);
  return { rows: followers.length > 0 ? [...heads, ...followers] : heads, heads: heads.length, full, fromTop: from === undefined };
}

/**
 * Starts one batch in a transaction. Round trips: BEGIN, claim, maybe the followers, then the
 * updates and COMMIT pipelined. Once its connection is lost (lib/platform/tx.ts) the batch
 * stops before its next statement and is left pending.
 */
export function startBatch(ctx: BatchContext, turn: BatchTurn, limit: number): BatchRun {
  let handOff: (claimed: Claimed) => void = () => {};
  const claimed = new Promise<Claimed>((resolve) => (handOff = resolve));
  // A failed update aborted the transaction, which the COMMIT rolled back: the batch fails with it.
  const result = transaction(ctx.sql, (tx, lost) => batchInTx(ctx, turn, limit, tx, handOff, lost)).then(async ({ result, marked }) => {
    await marked;
    return result;
  });
  // A batch that failed before its claim claimed nothing.
  const settled = (): void => {
    handOff(NOTHING);
    void claimed.then((c) => turn.window.hold(-c.rows));
  };
  result.then(settled, settled);
  return { claimed, result };
}

/** A batch's result, and its updates' outcomes (settled by the time the COMMIT's answer is in). */
interface Settled {
  readonly result: BatchResult;
  readonly marked: Promise<unknown>;
}

const NONE_MARKED: Promise<unknown> = Promise.resolve();

async function batchInTx(
  ctx: BatchContext,
  turn: BatchTurn,
  limit: number,
  tx: Tx,
  handOff: (claimed: Claimed) => void,
  lost: () => boolean,
): Promise<Settled> {
  // Never settles once the connection is lost: the batch is dropped with it, left pending.
  const stopIfLost = async (): Promise<void> => {
    if (lost()) await new Promise<never>(() => {});
  };
  const claimed = await turn.lock.hold(async () => {
    // Under the lock: no claim while the broker is away (no attempts burnt) or stopping.
    if (turn.stop.aborted || !ctx.broker.connected || lost()) return undefined;
    const { rows: claimedRows, heads, full, fromTop } = await claim(turn, limit, tx);
    turn.window.hold(claimedRows.length);
    const since = performance.now();
    // Handed over before the next claim, so publish order follows created_at.
    const { rows, outcomes, inTurn } = handOver(ctx, limit, claimedRows, heads);
    return { rows, full, since, fromTop, outcomes: inTurn ? Promise.resolve(await outcomes) : outcomes };
  });
  handOff(claimed ? { rows: claimed.rows.length, full: claimed.full } : NOTHING);
  if (!claimed || claimed.rows.length === 0) {
    await stopIfLost();
    return { result: claimed ? { ...EMPTY_RESULT, fromTop: claimed.fromTop, full: claimed.full } : EMPTY_RESULT, marked: NONE_MARKED };
  }
  const outcomes = await claimed.outcomes;
  const answeredMs = performance.now() - claimed.since;
  const { result, acked, failures, releases } = tally(ctx.topicPrefix, claimed.rows, outcomes);
  await stopIfLost();
  // Pipelined with the COMMIT right behind: one round trip. Awaited after it (startBatch).
  const marked = Promise.all([markPublished(tx, acked), recordFailures(tx, failures, ctx.retry), recordReleases(tx, releases)]);
  marked.catch(() => {});
  return { result: { ...result, answeredMs, fromTop: claimed.fromTop, full: claimed.full }, marked };
}

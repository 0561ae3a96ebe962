// One batch of the relay: in one transaction, claim due rows (FOR UPDATE SKIP LOCKED), each
// aggregate's in sequence (outbox-sql.ts claimHeads, claimFollowers),
// hand them all to the publisher, await the PUBACKs (bounded by a timeout), then one
// UPDATE each for the acknowledged, the failed and the suspect rows, and commit. The row
// locks keep every other relay off the batch until it is settled; a crash anywhere before
// the commit leaves every row pending, so the worst case is a second delivery, never a loss.
import type { Sql, Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { claimFollowers, claimHeads, claimHeadsUnbounded, batchSettings, markPublished, recordFailures, recordReleases, type OutboxRow, type RetryPolicy } from "./outbox-sql.ts";
import type { DeliverFn } from "./publisher.ts";
import type { GcPacer } from "../platform/gc-pacer.ts";
import type { ClaimFrontier, ClaimLock, HeadLimit, WindowSize } from "./claim-lock.ts";
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

/** What a lane holds while its batch runs. */
export interface BatchTurn {
  /** Serializes claim + hand-off across the relay's lanes, so publish order follows created_at. */
  readonly lock: ClaimLock;
  /** Where the next claim starts. */
  readonly frontier: ClaimFrontier;
  /** How many heads it takes, and how many due rows it looks at. */
  readonly heads: HeadLimit;
  readonly window: WindowSize;
  /** Aborted once the relay is stopping: no new claim. */
  readonly stop: AbortSignal;
}

/**
 * What a claim took: its rows, how many of them are heads (outbox-sql.ts claimHeads), and
 * whether its window was full (as many due rows as it asked for, locked or not: more may be due).
 */
export interface Claimed {
  readonly rows: number;
  readonly heads: number;
  readonly full: boolean;
}

const NOTHING: Claimed = { rows: 0, heads: 0, full: false };

export interface BatchRun {
  /** What was claimed, known as soon as it is handed to the publisher (nothing when none or failed). */
  readonly claimed: Promise<Claimed>;
  /** The settled batch, after its commit. */
  readonly result: Promise<BatchResult>;
}

// Claims of up to this many rows are published in turn (handover.ts publishInTurn): a burst
// waits for the broker's delayed PUBACKs (the stall window.ts's PINGREQ ends), and for a few
// rows a round trip each costs less. Whether the claim came back full does not matter: a
// small adaptive claim is full as soon as the relay falls a little behind, and a burst would
// then add the stall to every claim. Past this size the round trips cost more than the one
// stall. A claim that asked for more (a growing drain, or a gathered stream: gather.ts), or a
// claim of the whole OUTBOX_BATCH_SIZE, goes out at once: the outbox is busy.
export const IN_TURN_MAX = 50;

const LEFT_FOR_LATER: Outcome = { kind: "released", error: "not attempted: a row before it in its aggregate was not in the claim" };

/** The claim's rows in the order they are handed over, and their outcomes to come in that order. */
function handOver(ctx: BatchContext, limit: number, claimed: readonly OutboxRow[], heads: number): { rows: OutboxRow[]; outcomes: Promise<Outcome[]>; inTurn: boolean } {
  const { chains, left } = chainsOf(claimed, heads);
  const rows = [...chains.flat(), ...left];
  const leftOutcomes = left.map(() => LEFT_FOR_LATER);
  // A large claim goes out at once (throughput); a small one in turn (latency), still under
  // the claim lock either way.
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
 * The claim, under the claim lock: the heads of a window of due rows and, with room left,
 * their followers. The settings and the heads (with their window's figures) leave in one
 * write (pipelined): one round trip; the followers one more, when the heads left room.
 */
async function claim(turn: BatchTurn, limit: number, tx: Tx): Promise<{ rows: OutboxRow[]; heads: number; full: boolean; fromTop: boolean }> {
  const from = turn.frontier.from(performance.now());
  const headLimit = turn.heads.of(limit);
  // The window walks past the rows this relay holds, still locked and never heads, so they are
  // added to it: from the frontier, the last claim's rows at its end, found again (else every
  // window of a backlog comes back one row short, and not full); from the top, all the rows in
  // flight (else a small window behind the other lanes' rows takes none and moves the frontier
  // back over the same locked rows).
  const walk = turn.window.of(limit) + (from === undefined ? turn.window.held : turn.frontier.overlap);
  // A backlog of ChargeCreated rows, claimed from the frontier, needs no window: none of its
  // rows costs a probe, so nothing bounds the walk but the heads it is after (claimHeadsUnbounded).
  // The claim from the top, at least once a second, walks a window again and looks anew.
  const unbounded = from !== undefined && turn.window.unbounded;
  const [, { heads, window }] = await Promise.all([batchSettings(tx), unbounded ? claimHeadsUnbounded(tx, headLimit, from) : claimHeads(tx, headLimit, from, walk)]);
  if (!unbounded && window.end !== undefined) turn.window.claimed(walk, window.firstEvents, heads.length);
  // Stopped at its head limit, the walk ended at its last head: the next claim starts there.
  // Otherwise it walked the whole window, and the next starts where that ended.
  const stopped = heads.length === headLimit;
  const full = stopped || window.end !== undefined;
  const end = stopped ? heads.at(-1)?.createdAt : window.end;
  turn.frontier.claimed(limit, full ? limit : heads.length, end, atEnd(heads, end));
  // No room, or no other due row in the window (every one a head it took), or none that could
  // follow a head (every one a ChargeCreated, sequence 1): no followers to look for, no round
  // trip, and no probe of the aggregate index per row. A follower past the window waits to be
  // a head.
  const more = heads.length < limit && window.rows > heads.length;
  const room = more && window.rows > window.firstEvents;
  const followers = room ? await claimFollowers(tx, heads, limit - heads.length) : [];
  // A window of ChargeCreated rows only found no followers either: told so, the claims after a
  // backlog of chains take full claims of heads again, instead of leaving room for followers
  // that no longer come.
  if (more) turn.heads.claimed(limit, heads.length, followers.length);
  turn.window.walked(full && window.rows === window.firstEvents && followers.length === 0);
  return { rows: followers.length > 0 ? [...heads, ...followers] : heads, heads: heads.length, full, fromTop: from === undefined };
}

/** Never settles; what awaits it is dropped with it (nothing else references it). */
const forever = (): Promise<never> => new Promise<never>(() => {});

/**
 * Starts one batch in a transaction. Round trips: BEGIN, claim, the followers when the claim
 * was not full, the updates and the COMMIT (pipelined).
 * The transaction never touches a connection that closed under it (lib/platform/tx.ts): once
 * lost, the batch stops before its next statement and is left pending, and the pool opens a
 * fresh connection for the next one.
 */
export function startBatch(ctx: BatchContext, turn: BatchTurn, limit: number): BatchRun {
  let handOff: (claimed: Claimed) => void = () => {};
  const claimed = new Promise<Claimed>((resolve) => (handOff = resolve));
  // The updates' outcomes are awaited past the COMMIT (batchInTx): one that failed aborted the
  // transaction, which the COMMIT then rolled back, and the batch fails with its error.
  const result = transaction(ctx.sql, (tx, lost) => batchInTx(ctx, turn, limit, tx, handOff, lost)).then(async ({ result, marked }) => {
    await marked;
    return result;
  });
  // A batch that failed before its claim claimed nothing.
  result.then(
    () => handOff(NOTHING),
    () => handOff(NOTHING),
  );
  const release = (): void => void claimed.then((c) => turn.window.hold(-c.rows));
  result.then(release, release);
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
  const stopIfLost = async (): Promise<void> => {
    if (lost()) await forever();
  };
  const claimed = await turn.lock.hold(async () => {
    // Checked under the lock: no claim while the broker is away (no attempts burnt) or stopping.
    // (Never parked while holding the lock: the other lanes wait on it.)
    if (turn.stop.aborted || !ctx.broker.connected || lost()) return undefined;
    const { rows: claimedRows, heads, full, fromTop } = await claim(turn, limit, tx);
    // Held until the batch settles (startBatch).
    turn.window.hold(claimedRows.length);
    const since = performance.now();
    // Every head is handed to the broker before the next claim, so the heads' publish order
    // follows created_at; a small claim is published in turn before the lock is let go.
    const { rows, outcomes, inTurn } = handOver(ctx, limit, claimedRows, heads);
    return { rows, heads, full, since, fromTop, outcomes: inTurn ? Promise.resolve(await outcomes) : outcomes };
  });
  handOff(claimed ? { rows: claimed.rows.length, heads: claimed.heads, full: claimed.full } : NOTHING);
  if (!claimed || claimed.rows.length === 0) {
    await stopIfLost();
    return { result: claimed ? { ...EMPTY_RESULT, fromTop: claimed.fromTop, full: claimed.full } : EMPTY_RESULT, marked: NONE_MARKED };
  }
  const outcomes = await claimed.outcomes;
  const answeredMs = performance.now() - claimed.since;
  const { result, acked, failures, releases } = tally(ctx.topicPrefix, claimed.rows, outcomes);
  await stopIfLost();
  // The updates leave in one write (pipelined) and postgres.js sends the COMMIT right behind
  // them, without waiting for their answers: one round trip for the batch's end, not two. Their
  // outcomes are awaited after the COMMIT (startBatch); meanwhile a failure is only kept.
  const marked = Promise.all([markPublished(tx, acked), recordFailures(tx, failures, ctx.retry), recordReleases(tx, releases)]);
  marked.catch(() => {});
  return { result: { ...result, answeredMs, fromTop: claimed.fromTop, full: claimed.full }, marked };
}

// One batch in one transaction: claim due rows, publish, await the PUBACKs, one UPDATE per kind
// of outcome, commit. A crash before the commit leaves every row pending: never a loss.
import type { Sql, Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { claimFollowers, claimHeads, claimHeadsUnbounded, batchSettings, markPublished, recordFailures, recordReleases, type OutboxRow, type RetryPolicy } from "./outbox-sql.ts";
import type { BatchTurn } from "./claim-lock.ts";
import { EMPTY_RESULT, tally, type BatchResult, type Outcome } from "./outcome.ts";
import { chainsOf, publishChains, publishInTurn, type HandoverContext } from "./handover.ts";

export interface BatchContext extends HandoverContext {
  readonly sql: Sql;
  readonly maxClaim: number;
  readonly retry: RetryPolicy;
}

/** `full`: its window held as many due rows as it asked for (more may be due). */
type Claimed = { readonly rows: number; readonly full: boolean };

const NOTHING: Claimed = { rows: 0, full: false };

/** `claimed`: once the rows are handed to the publisher; `result`: after the commit. */
export interface BatchRun {
  readonly claimed: Promise<Claimed>;
  readonly result: Promise<BatchResult>;
}

// Claims up to this size go in turn: for a few rows a round trip each beats a delayed-PUBACK stall.
export const IN_TURN_MAX = 50;

const LEFT_FOR_LATER: Outcome = { kind: "released", error: "not attempted: a row before it in its aggregate was not in the claim" };

function handOver(ctx: BatchContext, limit: number, claimed: readonly OutboxRow[], heads: number): { rows: OutboxRow[]; outcomes: Promise<Outcome[]>; inTurn: boolean } {
  const { chains, left } = chainsOf(claimed, heads);
  const rows = [...chains.flat(), ...left];
  const leftOutcomes = left.map(() => LEFT_FOR_LATER);
  const inTurn = !(limit > IN_TURN_MAX || claimed.length === ctx.maxClaim);
  const outcomes = (inTurn ? publishInTurn(ctx, chains) : publishChains(ctx, chains)).then((o) => [...o, ...leftOutcomes]);
  return { rows, outcomes, inTurn };
}

function atEnd(heads: readonly OutboxRow[], end: string | undefined): number {
  let n = 0;
  for (let i = heads.length - 1; i >= 0 && heads[i]?.createdAt === end; i--) n++;
  return n;
}

/** Under the claim lock: the heads (pipelined with the settings) and, with room, their followers. */
async function claim(turn: BatchTurn, limit: number, tx: Tx): Promise<{ rows: OutboxRow[]; heads: number; full: boolean; fromTop: boolean }> {
  const from = turn.frontier.from(performance.now());
  const headLimit = turn.heads.of(limit);
  // The walk counts the rows this relay holds locked: from the frontier, the last claim's rows at
  // its end; from the top, all in flight (else a small window finds none behind the other lanes').
  const walk = turn.window.of(limit) + (from === undefined ? turn.window.held : turn.frontier.overlap);
  const unbounded = from !== undefined && turn.window.unbounded;
  const [, { heads, window }] = await Promise.all([batchSettings(tx), unbounded ? claimHeadsUnbounded(tx, headLimit, from) : claimHeads(tx, headLimit, from, walk)]);
  if (!unbounded && window.end !== undefined) turn.window.claimed(walk, window.firstEvents, heads.length);
  // The next claim starts at the last head when stopped by the head limit, else at the window's end.
  const stopped = heads.length === headLimit;
  const full = stopped || window.end !== undefined;
  const end = stopped ? heads.at(-1)?.createdAt : window.end;
  turn.frontier.claimed(limit, full ? limit : heads.length, end, atEnd(heads, end));
  // No room, or every row of the window a head or of sequence 1: no round trip for followers.
  const more = heads.length < limit && window.rows > heads.length;
  const room = more && window.rows > window.firstEvents;
  const followers = room ? await claimFollowers(tx, heads, limit - heads.length) : [];
  // Told even of none found, so claims after a backlog of chains take full claims of heads again.
  if (more) turn.heads.claimed(limit, heads.length, followers.length);
  turn.window.walked(full && window.rows === window.firstEvents && followers.length === 0);
  return { rows: followers.length > 0 ? [...heads, ...followers] : heads, heads: heads.length, full, fromTop: from === undefined };
}

const NONE_MARKED: Promise<unknown> = Promise.resolve();

// Round trips: BEGIN, claim, maybe the followers, then the updates and COMMIT pipelined.
export function startBatch(ctx: BatchContext, turn: BatchTurn, limit: number): BatchRun {
  let handOff: (claimed: Claimed) => void = () => {};
  const claimed = new Promise<Claimed>((resolve) => (handOff = resolve));
  // A failed update aborted the transaction, which the COMMIT rolled back: the batch fails with it.
  const result = transaction(ctx.sql, (tx, lost) => batchInTx(ctx, turn, limit, tx, handOff, lost)).then(
    ({ result, marked }) => marked.then(() => result),
  );
  // A batch that failed before its claim claimed nothing.
  const settled = (): void => {
    handOff(NOTHING);
    void claimed.then((c) => (turn.window.held -= c.rows));
  };
  result.then(settled, settled);
  return { claimed, result };
}

async function batchInTx(
  ctx: BatchContext,
  turn: BatchTurn,
  limit: number,
  tx: Tx,
  handOff: (claimed: Claimed) => void,
  lost: () => boolean,
): Promise<{ result: BatchResult; marked: Promise<unknown> }> {
  // Once the connection is lost the batch stops before its next statement, left pending.
  const stopIfLost = async (): Promise<void> => {
    if (lost()) await new Promise<never>(() => {});
  };
  const claimed = await turn.lock.hold(async () => {
    // No claim while the broker is away (no attempts burnt) or stopping.
    if (turn.stop.aborted || !ctx.broker.connected || lost()) return undefined;
    const { rows: claimedRows, heads, full, fromTop } = await claim(turn, limit, tx);
    turn.window.held += claimedRows.length;
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

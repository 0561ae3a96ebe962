// The relay's claim state, shared by its lanes. A lane claims and hands its rows to the
// publisher while holding the lock, so the next claim's rows leave after them and the publish
// order follows created_at across lanes.

/** `stop`: aborted once the relay is stopping (no new claim). */
export function createBatchTurn(stop: AbortSignal) {
  return { lock: createClaimLock(), frontier: createClaimFrontier(), heads: createHeadLimit(), window: createWindowSize(), stop };
}

export type BatchTurn = ReturnType<typeof createBatchTurn>;

function createClaimLock() {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    /** Runs `fn` once every earlier holder has finished (resolved or failed). */
    hold<T>(fn: () => Promise<T>): Promise<T> {
      const run = tail.then(fn);
      tail = run.catch(() => {});
      return run;
    },
  };
}

// A claim from the top of the pending index walks past every row the other lanes hold and
// the dead entries of rows just published, so the next claim starts where the last one ended.
// A row that appears behind that point (a late commit, a release, a back-off ended) is taken
// by the next claim from the top: the first after a short claim, and at least one this often.
const FROM_TOP_EVERY_MS = 1000;

/** Where the relay's next claim starts in the pending index. */
export function createClaimFrontier() {
  let last: string | undefined;
  let overlap = 0;
  let fromTopAt = Number.NEGATIVE_INFINITY;
  return {
    /** The created_at the next claim starts from, or undefined for the top of the index. */
    from(nowMs: number): string | undefined {
      if (last !== undefined && nowMs - fromTopAt < FROM_TOP_EVERY_MS) return last;
      fromTopAt = nowMs;
      return undefined;
    },
    /** Rows the last claim took at its end's created_at: a claim from there (>=) finds them again, locked. */
    get overlap(): number {
      return last === undefined ? 0 : overlap;
    },
    /** A claim of up to `limit` took `count`, the last created at `lastCreatedAt`, `atEnd` of them then. */
    claimed(limit: number, count: number, lastCreatedAt: string | undefined, atEnd = 0): void {
      last = count < limit ? undefined : lastCreatedAt;
      overlap = atEnd;
    },
  };
}

/**
 * How many heads a claim takes, so that their followers fill the rest: a backlog of many
 * events per aggregate is claimed as whole chains, not as heads whose later events every
 * following claim walks past, one probe each.
 */
function createHeadLimit() {
  // Followers per head, as the last claims found them.
  let ratio = 0;
  return {
    of: (limit: number): number => Math.max(1, Math.min(limit, Math.floor(limit / (1 + ratio)))),
    claimed(limit: number, heads: number, followers: number): void {
      if (heads === 0) return;
      const found = followers / heads;
      // Cut by the claim's size: the chains are longer than found, so take fewer heads next.
      const cut = followers > 0 && heads + followers >= limit;
      ratio = cut ? Math.max(found, ratio) * 2 : found;
    },
  };
}

// Windows grow to this many times the claim at most: past the claims of the other relays' lanes.
const MAX_WINDOW_FACTOR = 8;

/**
 * How many due rows a claim looks at (outbox-sql.ts claimHeads): `limit`, more while the
 * windows' sequence 1 rows are mostly held by another relay, else two relays take turns at
 * each other's locked windows and half the claims find nothing.
 */
function createWindowSize() {
  let factor = 1;
  let held = 0;
  let unbounded = false;
  return {
    of: (limit: number): number => limit * factor,
    /** Rows this relay's batches hold (claimed, not yet committed). */
    get held(): number {
      return held;
    },
    hold(rows: number): void {
      held += rows;
    },
    /** A full window of `walk` rows held `firstEvents` sequence 1 rows, of which the claim took `heads`. */
    claimed(walk: number, firstEvents: number, heads: number): void {
      // Those this relay's lanes hold are no reason to look further.
      const heldElsewhere = firstEvents - heads - held > walk / 2;
      factor = heldElsewhere ? Math.min(MAX_WINDOW_FACTOR, factor * 2) : Math.max(1, factor / 2);
    },
    /** The next claim from the frontier may walk without a window (claimHeadsUnbounded). */
    get unbounded(): boolean {
      return unbounded;
    },
    /** A claim ended: full, walking only sequence 1 rows and finding no followers, or not. */
    walked(onlyFirstEvents: boolean): void {
      unbounded = onlyFirstEvents && factor === 1;
    },
  };
}

// Claims are serialized within a relay: a lane claims and hands its rows to the publisher
// while holding this lock, so the next claim's rows leave after them and the publish order
// follows created_at across lanes.

export interface ClaimLock {
  /** Runs `fn` once every earlier holder has finished (resolved or failed). */
  hold<T>(fn: () => Promise<T>): Promise<T>;
}

export function createClaimLock(): ClaimLock {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    hold(fn) {
      const run = tail.then(fn);
      tail = run.catch(() => {});
      return run;
    },
  };
}

/** Where the relay's next claim starts in the pending index (claims are serialized: see above). */
export interface ClaimFrontier {
  /** The created_at the next claim starts from, or undefined for the top of the index. */
  from(nowMs: number): string | undefined;
  /**
   * Rows the last claim took at its end's created_at: a claim from the frontier (created_at >=,
   * as rows of one transaction share theirs) finds them again, still locked, in its window.
   */
  readonly overlap: number;
  /**
   * A claim of up to `limit` rows came back with `count`, the last created at `lastCreatedAt`,
   * `atEnd` of its rows created then.
   */
  claimed(limit: number, count: number, lastCreatedAt: string | undefined, atEnd?: number): void;
}

// A claim from the top of the pending index walks past every row the relay's other lanes
// hold locked, and past the entries of the rows it has just published until they are known
// dead, which costs far more than a claim starting past them. Claims come in created_at order, so the next one starts where the
// last one ended. A row that appears behind that point (a transaction that committed late,
// a row released after a lost connection, a back-off that ended) is claimed by the next claim
// from the top: the first after a short claim, and at least one this often.
const FROM_TOP_EVERY_MS = 1000;

export function createClaimFrontier(): ClaimFrontier {
  let last: string | undefined;
  let overlap = 0;
  let fromTopAt = Number.NEGATIVE_INFINITY;
  return {
    from(nowMs) {
      if (last !== undefined && nowMs - fromTopAt < FROM_TOP_EVERY_MS) return last;
      fromTopAt = nowMs;
      return undefined;
    },
    get overlap() {
      return last === undefined ? 0 : overlap;
    },
    claimed(limit, count, lastCreatedAt, atEnd = 0) {
      last = count < limit ? undefined : lastCreatedAt;
      overlap = atEnd;
    },
  };
}

/**
 * How many heads a claim takes, so that their followers fill the rest of it (claims are
 * serialized: one per relay). A backlog of many events per aggregate is then claimed as whole
 * chains, a few heads and every due row behind them, not as a claim full of heads whose later
 * events every following claim walks past, one probe each, while those heads are in flight.
 */
export interface HeadLimit {
  /** The heads a claim of `limit` rows takes. */
  of(limit: number): number;
  /** A claim of `limit` rows took `heads` heads and `followers` followers. */
  claimed(limit: number, heads: number, followers: number): void;
}

export function createHeadLimit(): HeadLimit {
  // Followers per head, as the last claims found them: 0 while every head stands alone.
  let ratio = 0;
  return {
    of: (limit) => Math.max(1, Math.min(limit, Math.floor(limit / (1 + ratio)))),
    claimed(limit, heads, followers) {
      if (heads === 0) return;
      const found = followers / heads;
      // Cut by the claim's size: the chains are longer than found, so take fewer heads next.
      const cut = followers > 0 && heads + followers >= limit;
      ratio = cut ? Math.max(found, ratio) * 2 : found;
    },
  };
}

/**
 * How many due rows a claim of `limit` rows looks at (its window, outbox-sql.ts claimHeads):
 * `limit` of them, more while the windows' ChargeCreated rows (heads without a probe) are
 * mostly held by another relay's claims: else two relays on one database take turns at each
 * other's locked windows, and half the claims find nothing.
 */
export interface WindowSize {
  of(limit: number): number;
  /** Rows this relay's batches hold now (claimed, locked, not yet committed). */
  readonly held: number;
  /** Rows this relay's batches hold now (claimed, not yet committed): `rows` more, or fewer. */
  hold(rows: number): void;
  /** A full window of `walk` rows held `firstEvents` ChargeCreated rows, of which the claim took `heads`. */
  claimed(walk: number, firstEvents: number, heads: number): void;
  /**
   * Whether the next claim from the frontier may walk without a window (outbox-sql.ts
   * claimHeadsUnbounded): the last claim was full, every row it walked a ChargeCreated it
   * could take, and no window had to widen past another relay's locks.
   */
  readonly unbounded: boolean;
  /** A claim ended: full, walking only ChargeCreated rows and finding no followers, or not. */
  walked(onlyFirstEvents: boolean): void;
}

// Windows grow to this many times the claim at most: past the claims of the other relays' lanes.
const MAX_WINDOW_FACTOR = 8;

export function createWindowSize(): WindowSize {
  let factor = 1;
  let held = 0;
  let unbounded = false;
  return {
    of: (limit) => limit * factor,
    get held() {
      return held;
    },
    hold(rows) {
      held += rows;
    },
    claimed(walk, firstEvents, heads) {
      // ChargeCreated rows it did not take are locked; those this relay's lanes hold are no reason to look further.
      const heldElsewhere = firstEvents - heads - held > walk / 2;
      factor = heldElsewhere ? Math.min(MAX_WINDOW_FACTOR, factor * 2) : Math.max(1, factor / 2);
    },
    get unbounded() {
      return unbounded;
    },
    walked(onlyFirstEvents) {
      unbounded = onlyFirstEvents && factor === 1;
    },
  };
}

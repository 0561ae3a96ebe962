// The relay's claim state, shared by its lanes. A lane claims and hands over its rows under the
// lock, so the next claim's rows leave after them: publish order follows created_at across lanes.

export function createBatchTurn(stop: AbortSignal) {
  let tail: Promise<unknown> = Promise.resolve();
  const lock = {
    hold<T>(fn: () => Promise<T>): Promise<T> {
      const run = tail.then(fn);
      tail = run.catch(() => {});
      return run;
    },
  };
  return { lock, frontier: createClaimFrontier(), heads: createHeadLimit(), window: createWindowSize(), stop };
}

export type BatchTurn = ReturnType<typeof createBatchTurn>;

// From the top a claim walks past every row the other lanes hold and dead entries, so claims start
// where the last ended; a row behind it (a late commit) waits for a claim from the top, this often.
const FROM_TOP_EVERY_MS = 1000;

export function createClaimFrontier() {
  let last: string | undefined;
  let overlap = 0;
  let fromTopAt = Number.NEGATIVE_INFINITY;
  return {
    /** Undefined for the top of the index. */
    from(nowMs: number): string | undefined {
      if (last !== undefined && nowMs - fromTopAt < FROM_TOP_EVERY_MS) return last;
      fromTopAt = nowMs;
      return undefined;
    },
    /** The last claim's rows at its end's created_at: a claim from there (>=) finds them again, locked. */
    get overlap(): number {
      return last === undefined ? 0 : overlap;
    },
    claimed(limit: number, count: number, lastCreatedAt: string | undefined, atEnd = 0): void {
      last = count < limit ? undefined : lastCreatedAt;
      overlap = atEnd;
    },
  };
}

// Heads per claim, leaving room for followers: long chains are claimed whole, not probed past per claim.
function createHeadLimit() {
  let followersPerHead = 0;
  return {
    of: (limit: number): number => Math.max(1, Math.min(limit, Math.floor(limit / (1 + followersPerHead)))),
    claimed(limit: number, heads: number, followers: number): void {
      if (heads === 0) return;
      const found = followers / heads;
      // Cut by the claim's size: the chains are longer than found, so take fewer heads next.
      const cut = followers > 0 && heads + followers >= limit;
      followersPerHead = cut ? Math.max(found, followersPerHead) * 2 : found;
    },
  };
}

// Enough to walk past the claims of the other relays' lanes.
const MAX_WINDOW_FACTOR = 8;

// Due rows a claim walks: more while their sequence 1 rows are mostly held by another relay, else
// two relays take turns at each other's locked windows and half the claims find nothing.
function createWindowSize() {
  let factor = 1;
  return {
    /** Rows claimed by this relay's batches and not yet committed. */
    held: 0,
    /** The next claim from the frontier may walk without a window. */
    unbounded: false,
    of: (limit: number): number => limit * factor,
    claimed(walk: number, firstEvents: number, heads: number): void {
      // Those this relay's lanes hold are no reason to look further.
      const heldElsewhere = firstEvents - heads - this.held > walk / 2;
      factor = heldElsewhere ? Math.min(MAX_WINDOW_FACTOR, factor * 2) : Math.max(1, factor / 2);
    },
    walked(onlyFirstEvents: boolean): void {
      this.unbounded = onlyFirstEvents && factor === 1;
    },
  };
}

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
  /** A claim of up to `limit` rows came back with `count`, the last created at `lastCreatedAt`. */
  claimed(limit: number, count: number, lastCreatedAt: string | undefined): void;
}

// A claim from the top of the pending index walks past every row the relay's other lanes
// hold locked, and past the entries of the rows it has just published until they are known
// dead, more than twice the time of a claim starting past them (bench/README.md, "Relay
// drain"). Claims come in created_at order, so the next one starts where the
// last one ended. A row that appears behind that point (a transaction that committed late,
// a row released after a lost connection, a back-off that ended) is claimed by the next claim
// from the top: the first after a short claim, and at least one this often.
const FROM_TOP_EVERY_MS = 1000;

export function createClaimFrontier(): ClaimFrontier {
  let last: string | undefined;
  let fromTopAt = Number.NEGATIVE_INFINITY;
  return {
    from(nowMs) {
      if (last !== undefined && nowMs - fromTopAt < FROM_TOP_EVERY_MS) return last;
      fromTopAt = nowMs;
      return undefined;
    },
    claimed(limit, count, lastCreatedAt) {
      last = count < limit ? undefined : lastCreatedAt;
    },
  };
}

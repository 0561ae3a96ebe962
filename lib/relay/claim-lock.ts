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

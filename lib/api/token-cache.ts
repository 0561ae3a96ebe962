// Verified bearer tokens remembered by their exact text, so a client that sends one token with
// every request costs one signature check per minute instead of one per request (the check is
// a POST's largest single cost: bench/README.md, "API vs the bare stack").
//
// Why reusing a verdict is safe: a verification is a function of the token's bytes and the
// key, except time. nbf only gets easier to pass, and exp is checked here on every use with
// jose's own rule and tolerance. A JWKS key can be withdrawn: each verdict carries a stamp of
// the key set that made it, reused only while that set is still the one jose would use, so a
// withdrawn key is refused exactly when jose alone would refuse it. Only acceptances are kept,
// so refused tokens cannot fill the cache.

// A verdict is reused this long at most, then the token is verified again.
export const MAX_REUSE_MS = 60_000;
// Distinct live tokens remembered; past this the least recently used goes. A token is a few
// hundred bytes, so this bounds the cache to a few MB whatever the clients send.
export const MAX_TOKENS = 10_000;

interface Entry {
  readonly tenant: string;
  /** The token's exp claim (seconds since the epoch). */
  readonly exp: number;
  /** Date.now() after which the token is verified again. */
  readonly reuseUntil: number;
  /** Which keys verified it, in the caller's terms. */
  readonly stamp: number;
}

export interface TokenCache {
  /**
   * The tenant of a token accepted before, still within its exp, whose stamp `isCurrent`
   * accepts (the keys that verified it are still the ones in use); undefined otherwise.
   */
  get(token: string, isCurrent: (stamp: number) => boolean): string | undefined;
  remember(token: string, tenant: string, exp: number, stamp: number): void;
  readonly size: number;
}

/** `toleranceS`: the clock tolerance the verifier applies to exp. `now` for tests. */
export function createTokenCache(toleranceS: number, maxTokens = MAX_TOKENS, now: () => number = Date.now): TokenCache {
  // A Map iterates in insertion order: re-inserting on use keeps the least recent first.
  const entries = new Map<string, Entry>();
  // The entry last (re-)inserted, so the last in the Map's order: a client sending one token
  // with every request finds it here and the order is already right, without a re-insertion.
  let newest: Entry | undefined;
  return {
    get(token, isCurrent) {
      const entry = entries.get(token);
      if (entry === undefined) return undefined;
      const ms = now();
      // jose's rule: expired when exp <= now - tolerance, now in whole seconds.
      if (ms >= entry.reuseUntil || entry.exp <= Math.floor(ms / 1000) - toleranceS || !isCurrent(entry.stamp)) {
        entries.delete(token);
        return undefined;
      }
      if (entry !== newest) {
        entries.delete(token);
        entries.set(token, entry);
        newest = entry;
      }
      return entry.tenant;
    },
    remember(token, tenant, exp, stamp) {
      entries.delete(token);
      newest = { tenant, exp, reuseUntil: now() + MAX_REUSE_MS, stamp };
      entries.set(token, newest);
      if (entries.size > maxTokens) entries.delete(entries.keys().next().value as string);
    },
    get size() {
      return entries.size;
    },
  };
}

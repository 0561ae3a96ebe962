// Verified bearer tokens remembered by their exact text: a client sending one token with every
// request costs one signature check a minute, not one per request. Safe because a verdict depends
// only on the token, the key and time: nbf only gets easier, exp is checked on every use with
// jose's rule, and a JWKS verdict carries a stamp of its key set, reused only while jose would
// still use that set. Only acceptances are kept, so refused tokens cannot fill the cache.

// A verdict is reused this long at most, then the token is verified again.
export const MAX_REUSE_MS = 60_000;
// Distinct live tokens remembered; past this the least recently used goes. A token is a few
// hundred bytes, so this bounds the cache to a few MB whatever the clients send.
const MAX_TOKENS = 10_000;

/** `exp`: the token's claim; `reuseUntil`: Date.now() past which it is verified again; `stamp`: its keys. */
type Entry = { readonly tenant: string; readonly exp: number; readonly reuseUntil: number; readonly stamp: number };

/** `toleranceS`: the clock tolerance the verifier applies to exp. `now` for tests. */
export function createTokenCache(toleranceS: number, maxTokens = MAX_TOKENS, now: () => number = Date.now) {
  // A Map iterates in insertion order: re-inserting on use keeps the least recent first.
  const entries = new Map<string, Entry>();
  // The entry last (re-)inserted, so the last in the Map's order: a client sending one token
  // with every request finds it here and the order is already right, without a re-insertion.
  let newest: Entry | undefined;
  return {
    /** The tenant of a token accepted before, within its exp, whose keys `isCurrent` still accepts. */
    get(token: string, isCurrent: (stamp: number) => boolean): string | undefined {
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
    remember(token: string, tenant: string, exp: number, stamp: number): void {
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

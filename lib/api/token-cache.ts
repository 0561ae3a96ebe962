// Accepted bearer tokens by their exact text: one signature check a minute per token. Safe: nbf only
// gets easier, exp is checked on every use, a JWKS verdict is reused only while its key set is current.

export const MAX_REUSE_MS = 60_000;
// Past this the least recently used goes: a few MB at most whatever the clients send.
const MAX_TOKENS = 10_000;

type Entry = { readonly tenant: string; readonly exp: number; readonly reuseUntil: number; readonly stamp: number };

/** `toleranceS`: the clock tolerance the verifier applies to exp. */
export function createTokenCache(toleranceS: number, maxTokens = MAX_TOKENS, now: () => number = Date.now) {
  // A Map iterates in insertion order: re-inserting on use keeps the least recent first.
  const entries = new Map<string, Entry>();
  // The last in the Map's order: one token sent with every request needs no re-insertion.
  let newest: Entry | undefined;
  return {
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

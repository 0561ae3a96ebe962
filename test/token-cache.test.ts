// The cache of verified tokens: a verdict is reused only while jose would still accept the
// token (exp with the clock tolerance), for at most MAX_REUSE_MS, and for a bounded number of tokens.
import { expect, test } from "bun:test";
import { createTokenCache, MAX_REUSE_MS } from "../lib/api/auth.ts";

const TOLERANCE_S = 30;
const current = (stamp: number) => stamp === 0;

function clock(startMs: number) {
  let ms = startMs;
  return { now: () => ms, set: (value: number) => void (ms = value) };
}

test("a remembered token names its tenant until exp + tolerance, by jose's rule (expired when exp <= now - tolerance)", () => {
  const t = clock(1_000_000_000_000);
  const cache = createTokenCache(TOLERANCE_S, 10, t.now);
  const exp = 1_000_000_010; // 10 s after the start
  cache.remember("tok", "tenant-a", exp, 0);
  expect(cache.get("tok", current)).toBe("tenant-a");
  t.set((exp + TOLERANCE_S) * 1000 - 1); // now - tolerance = exp - 1: still accepted
  expect(cache.get("tok", current)).toBe("tenant-a");
  t.set((exp + TOLERANCE_S) * 1000); // now - tolerance = exp: jose refuses, so must the cache
  expect(cache.get("tok", current)).toBeUndefined();
  expect(cache.size).toBe(0);
});

test("a verdict is reused for MAX_REUSE_MS at most, however far away exp is", () => {
  const t = clock(1_000_000_000_000);
  const cache = createTokenCache(TOLERANCE_S, 10, t.now);
  cache.remember("tok", "tenant-a", 2_000_000_000, 0);
  t.set(1_000_000_000_000 + MAX_REUSE_MS - 1);
  expect(cache.get("tok", current)).toBe("tenant-a");
  t.set(1_000_000_000_000 + MAX_REUSE_MS);
  expect(cache.get("tok", current)).toBeUndefined();
});

test("only the exact token text hits; the least recently used goes first past the bound", () => {
  const t = clock(1_000_000_000_000);
  const cache = createTokenCache(TOLERANCE_S, 2, t.now);
  cache.remember("a", "tenant-a", 2_000_000_000, 0);
  cache.remember("b", "tenant-b", 2_000_000_000, 0);
  expect(cache.get("a ", current)).toBeUndefined();
  expect(cache.get("A", current)).toBeUndefined();
  expect(cache.get("a", current)).toBe("tenant-a"); // a is now the most recent
  cache.remember("c", "tenant-c", 2_000_000_000, 0);
  expect(cache.size).toBe(2);
  expect(cache.get("b", current)).toBeUndefined();
  expect(cache.get("a", current)).toBe("tenant-a");
  expect(cache.get("c", current)).toBe("tenant-c");
});

test("a verdict whose stamp is no longer current (its key set was fetched again) is not reused, and is dropped", () => {
  const cache = createTokenCache(TOLERANCE_S, 10, () => 1_000_000_000_000);
  cache.remember("tok", "tenant-a", 2_000_000_000, 3);
  expect(cache.get("tok", (stamp) => stamp === 3)).toBe("tenant-a");
  expect(cache.get("tok", (stamp) => stamp === 4)).toBeUndefined();
  expect(cache.size).toBe(0);
});

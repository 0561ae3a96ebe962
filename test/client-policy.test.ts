// The client's retry policy on its own: Retry-After, the back-off's bounds, the budget's
// bound, which statuses are retried, and the key stores (a file store read again by a new
// instance, as after a restart).
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backoffMs, isRetriedStatus, MemoryKeyStore, parseRetryAfter, RetryBudget, shouldRetry } from "charges-outbox/client";
import { FileKeyStore } from "charges-outbox/client/file-store";

test("Retry-After: delay-seconds, an HTTP date, a date in the past, and unreadable values", () => {
  const now = Date.parse("2026-12-02T07:00:00Z");
  expect(parseRetryAfter("1", now)).toBe(1000);
  expect(parseRetryAfter(" 120 ", now)).toBe(120_000);
  expect(parseRetryAfter("Wed, 02 Dec 2026 07:00:30 GMT", now)).toBe(30_000);
  expect(parseRetryAfter("Wed, 02 Dec 2026 06:59:00 GMT", now)).toBe(0);
  for (const bad of [null, "", "-1", "1.5", "soon", "12abc"]) expect(parseRetryAfter(bad, now)).toBeUndefined();
});

test("back-off with full jitter: within [0, min(max, base · 2^(n-1))), doubling per retry", () => {
  const options = { baseMs: 100, maxMs: 5_000 };
  expect([1, 2, 3, 4].map((n) => backoffMs(n, options, 0.999999))).toEqual([99, 199, 399, 799]);
  expect(backoffMs(20, options, 0.999999)).toBe(4999);
  for (let n = 1; n < 30; n += 1) expect(backoffMs(n, options, 0)).toBe(0);
});

test("the budget: retries never exceed burst + perSecond · seconds + perSuccess · successes", async () => {
  let now = 0;
  const budget = new RetryBudget({ burst: 10, perSecond: 2, perSuccess: 1 }, () => now);
  const never = Number.POSITIVE_INFINITY;
  const grants = async (n: number): Promise<number> => {
    // A deadline already past: a retry with no token is refused at once instead of waiting.
    let granted = 0;
    for (let i = 0; i < n; i += 1) if (await budget.acquire(now)) granted += 1;
    return granted;
  };
  expect(await grants(100)).toBe(10);
  for (let i = 0; i < 4; i += 1) budget.succeeded();
  now += 1500; // 3 tokens of time
  expect(await grants(100)).toBe(4 + 3);
  expect(budget.stats).toEqual({ granted: 17, waited: 0, refused: 183, successes: 4, waiting: 0 });
  // The bucket never holds more than its burst, however long it was idle or however much succeeded.
  now += 3_600_000;
  for (let i = 0; i < 100; i += 1) budget.succeeded();
  expect(await grants(100)).toBe(10);
  // With no token, a retry waits; a success hands its token to the first waiting retry, in turn.
  const first = budget.acquire(never);
  const second = budget.acquire(never);
  expect(budget.stats.waiting).toBe(2);
  budget.succeeded();
  expect(await first).toBe(true);
  expect(budget.stats.waiting).toBe(1);
  const aborting = new AbortController();
  const third = budget.acquire(never, aborting.signal);
  aborting.abort();
  expect(await third).toBe(false);
  budget.succeeded();
  expect(await second).toBe(true);
  expect(budget.stats).toMatchObject({ waited: 2, waiting: 0 });
});

test("the budget's floor: a waiting retry gets the token time makes, and its deadline ends the wait", async () => {
  // perSecond 1000: the next token is 1 ms away, so the wait ends on the floor's timer, not a sleep.
  const budget = new RetryBudget({ burst: 1, perSecond: 1000, perSuccess: 0 });
  expect(await budget.acquire(Date.now() + 60_000)).toBe(true);
  expect(await budget.acquire(Date.now() + 60_000)).toBe(true);
  // No floor and nothing succeeding: the wait ends at the deadline, refused.
  const starved = new RetryBudget({ burst: 0, perSecond: 0, perSuccess: 1 });
  expect(await starved.acquire(Date.now() + 20)).toBe(false);
  expect(starved.stats).toEqual({ granted: 0, waited: 0, refused: 1, successes: 0, waiting: 0 });
});

test("budget options: a missing or negative value is a TypeError naming it, before anything is sent", () => {
  const old = { burst: 10, perSecond: 1, ratio: 0.1 } as unknown as ConstructorParameters<typeof RetryBudget>[0];
  expect(() => new RetryBudget(old)).toThrow("retryBudget.perSuccess must be a finite number ≥ 0, got undefined");
  expect(() => new RetryBudget({ burst: -1, perSecond: 1, perSuccess: 1 })).toThrow("retryBudget.burst must be a finite number ≥ 0, got -1");
});

test("retried statuses: 409, 429, 500, 502, 503, 504; never 400, 401, 402, 404, 413, 415, 422", () => {
  expect([409, 429, 500, 502, 503, 504].every(isRetriedStatus)).toBe(true);
  expect([200, 201, 400, 401, 402, 404, 413, 415, 422].some(isRetriedStatus)).toBe(false);
});

test("Should-Retry overrides the status of a non-2xx answer either way; absent or unreadable, the status decides", () => {
  expect(shouldRetry(503, "false")).toBe(false);
  expect(shouldRetry(500, " FALSE ")).toBe(false);
  expect(shouldRetry(400, "true")).toBe(true);
  expect(shouldRetry(201, "true")).toBe(false);
  expect(shouldRetry(503, null)).toBe(true);
  expect(shouldRetry(422, "maybe")).toBe(false);
  expect(shouldRetry(502, "")).toBe(true);
});

test("the file store: a new instance on the same file (a restarted process) finds the intent", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "client-store-")), "keys.json");
  const first = new FileKeyStore(path);
  expect(await first.get("order-1")).toBeUndefined();
  const record = { idempotencyKey: crypto.randomUUID(), requestHash: "ab".repeat(32), createdAt: 1 };
  await Promise.all([first.set("order-1", record), first.set("__proto__", { ...record, createdAt: 2 })]);
  const second = new FileKeyStore(path);
  expect(await second.get("order-1")).toEqual(record);
  expect((await second.get("__proto__"))?.createdAt).toBe(2);
  await second.delete("order-1");
  expect(Object.keys(JSON.parse(readFileSync(path, "utf8")) as object)).toEqual(["__proto__"]);
});

test("the memory store keeps an intent for the process's life", () => {
  const store = new MemoryKeyStore();
  store.set("a", { idempotencyKey: "k", requestHash: "h", createdAt: 0 });
  expect(store.get("a")?.idempotencyKey).toBe("k");
  store.delete("a");
  expect(store.get("a")).toBeUndefined();
});

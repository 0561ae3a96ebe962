// The client's retry policy on its own: Retry-After, the back-off's bounds, the budget's
// bound, which statuses are retried, and the key stores (a file store read again by a new
// instance, as after a restart).
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backoffMs, isRetriedStatus, MemoryKeyStore, parseRetryAfter, RetryBudget } from "charges-outbox/client";
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

test("the budget: retries never exceed burst + perSecond · seconds + ratio · first tries", () => {
  let now = 0;
  const budget = new RetryBudget({ burst: 5, perSecond: 2, ratio: 0.5 }, () => now);
  let granted = 0;
  for (let i = 0; i < 100; i += 1) if (budget.withdraw()) granted += 1;
  expect(granted).toBe(5);
  for (let i = 0; i < 4; i += 1) budget.deposit();
  now += 1500; // 3 tokens of time
  for (let i = 0; i < 100; i += 1) if (budget.withdraw()) granted += 1;
  expect(granted).toBe(5 + 2 + 3);
  expect(budget.stats).toEqual({ granted: 10, refused: 190 });
  // The bucket never holds more than its burst, however long it was idle.
  now += 3_600_000;
  let afterIdle = 0;
  for (let i = 0; i < 100; i += 1) if (budget.withdraw()) afterIdle += 1;
  expect(afterIdle).toBe(5);
});

test("retried statuses: 409, 429, 502, 503, 504; never 400, 401, 402, 404, 413, 415, 422", () => {
  expect([409, 429, 502, 503, 504].every(isRetriedStatus)).toBe(true);
  expect([200, 201, 400, 401, 402, 404, 413, 415, 422, 500].some(isRetriedStatus)).toBe(false);
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

// The API-side notifier: at most one NOTIFY per window, the first at once, and a trailing
// one so that every poke is followed by a notify; never throws into the API.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/shared/db.ts";
import { createOutboxNotifier, OUTBOX_CHANNEL } from "../lib/shared/wakeup.ts";
import { waitUntil } from "../testkit/outbox.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_wakeup");
const notifies: number[] = [];
const listener = await db.sql.listen(OUTBOX_CHANNEL, () => notifies.push(performance.now()));
afterAll(async () => {
  await listener.unlisten();
  await db.drop();
});

const WINDOW_MS = 100;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("a burst of pokes sends one notify at once and one trailing notify at the end of the window", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, WINDOW_MS);
  const started = performance.now();
  for (let i = 0; i < 200; i++) notifier.poke();
  await waitUntil(() => notifies.length >= 1, 2000, "the leading notify");
  expect(notifies[0]! - started).toBeLessThan(WINDOW_MS); // not held for the window
  await waitUntil(() => notifies.length >= 2, 2000, "the trailing notify");
  expect(notifies[1]! - started).toBeGreaterThanOrEqual(WINDOW_MS - 5);
  await sleep(WINDOW_MS * 3);
  expect(notifies).toHaveLength(2);

  // Quiet for longer than the window: the next poke notifies at once again.
  const again = performance.now();
  notifier.poke();
  await waitUntil(() => notifies.length >= 3, 2000, "a fresh leading notify");
  expect(notifies[2]! - again).toBeLessThan(WINDOW_MS);
  await notifier.close();
});

test("pokes spread over several windows: at most one notify per window, the last poke always followed by one", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, WINDOW_MS);
  const started = performance.now();
  let lastPoke = started;
  for (let i = 0; i < 25; i++) {
    lastPoke = performance.now();
    notifier.poke();
    await sleep(20); // 500 ms of pokes every 20 ms
  }
  await sleep(WINDOW_MS * 2);
  const elapsed = lastPoke - started;
  expect(notifies.length).toBeLessThanOrEqual(Math.ceil(elapsed / WINDOW_MS) + 1);
  expect(notifies.length).toBeGreaterThanOrEqual(2); // more than the leading one: the pokes kept coming
  expect(notifies.at(-1)!).toBeGreaterThanOrEqual(lastPoke);
  await notifier.close();
});

test("close() sends the notify still owed; a failing notify never throws into the caller", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, 10_000);
  notifier.poke();
  notifier.poke(); // owed until the window ends, 10 s from now
  await notifier.close();
  await waitUntil(() => notifies.length >= 2, 2000, "the owed notify");

  const closedSql = createSql(db.url, { max: 1 });
  await closedSql.end();
  const errors: unknown[] = [];
  const failing = createOutboxNotifier(closedSql, WINDOW_MS, (error) => errors.push(error));
  expect(() => failing.poke()).not.toThrow();
  await failing.close();
  expect(errors).toHaveLength(1);
});

// The API-side notifier: at most one NOTIFY per window, the first at once, and a trailing
// one so that every poke is followed by a notify; never throws into the API.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { createOutboxNotifier, OUTBOX_CHANNEL, type OutboxNotifier } from "../lib/platform/wakeup.ts";
import { freshDatabase } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_wakeup");
const notifies: number[] = [];
// Markers the test sends itself on the channel: notifications arrive in commit order, so once
// a marker sent after close() is here, every notify the notifier sent is here too.
const markers = new Set<string>();
const listener = await db.sql.listen(OUTBOX_CHANNEL, (payload) => (payload ? markers.add(payload) : notifies.push(performance.now())));
afterAll(async () => {
  await listener.unlisten();
  await db.drop();
});

const WINDOW_MS = 100;
const LONG_WINDOW_MS = 600_000;

/** Everything the notifier sent, once close() has returned (no timer of it can fire after that). */
async function allNotifiesOf(notifier: OutboxNotifier): Promise<number[]> {
  await notifier.close();
  const marker = crypto.randomUUID();
  await db.sql`select pg_notify(${OUTBOX_CHANNEL}, ${marker})`;
  await waitUntil(() => markers.has(marker), 2000, "the marker notify");
  return [...notifies];
}

test("a burst of pokes sends one notify at once, and owes one trailing notify until the window ends", async () => {
  notifies.length = 0;
  // A window far longer than the test: the leading notify can only be the one sent at once.
  const notifier = createOutboxNotifier(db.sql, LONG_WINDOW_MS);
  for (let i = 0; i < 200; i++) notifier.poke();
  await waitUntil(() => notifies.length >= 1, 10_000, "the leading notify");
  // Nothing else while the window is open: a marker sent now arrives after anything sent before it.
  const marker = crypto.randomUUID();
  await db.sql`select pg_notify(${OUTBOX_CHANNEL}, ${marker})`;
  await waitUntil(() => markers.has(marker), 10_000, "the marker notify");
  expect(notifies).toHaveLength(1);
  // close() sends the trailing notify the burst is owed: 200 pokes, two notifies.
  expect(await allNotifiesOf(notifier)).toHaveLength(2);
});

test("the trailing notify goes out when the window ends, and a poke after a quiet window notifies at once again", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, WINDOW_MS);
  const started = performance.now();
  for (let i = 0; i < 200; i++) notifier.poke();
  await waitUntil(() => notifies.length >= 2, 10_000, "the leading and the trailing notify");
  expect(notifies[1]! - started).toBeGreaterThanOrEqual(WINDOW_MS - 5); // not before the window ended

  // Quiet for longer than the window (the condition under test, not a synchronization):
  // the next poke notifies again without waiting for a trailing one.
  await waitUntil(() => performance.now() - notifies[1]! > WINDOW_MS * 1.5, 10_000, "a quiet window");
  notifier.poke();
  await waitUntil(() => notifies.length >= 3, 10_000, "a fresh leading notify");
  // 200 pokes and one more: the leading, the trailing and the fresh leading notify, no other.
  expect(await allNotifiesOf(notifier)).toHaveLength(3);
});

test("pokes spread over several windows: at most one notify per window, the last poke always followed by one", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, WINDOW_MS);
  const started = performance.now();
  let lastPoke = started;
  // The load under test: a poke every 20 ms for 500 ms.
  for (let i = 0; i < 25; i++) {
    await waitUntil(() => performance.now() >= started + i * 20, 2000, "the next poke's time", 1);
    lastPoke = performance.now();
    notifier.poke();
  }
  await waitUntil(() => notifies.length > 0 && notifies.at(-1)! >= lastPoke, 2000, "a notify after the last poke");
  const elapsed = lastPoke - started;
  const sent = await allNotifiesOf(notifier);
  expect(sent.length).toBeLessThanOrEqual(Math.ceil(elapsed / WINDOW_MS) + 1);
  expect(sent.length).toBeGreaterThanOrEqual(2); // more than the leading one: the pokes kept coming
});

test("an API past 1,000 commits a second widens its window: after the trailing notify, the busy window's pokes wait for its end", async () => {
  notifies.length = 0;
  // 200 pokes at once read as a busy stream; the busy window is longer than the test.
  const notifier = createOutboxNotifier(db.sql, 20, undefined, LONG_WINDOW_MS);
  for (let i = 0; i < 200; i++) notifier.poke();
  await waitUntil(() => notifies.length >= 2, 10_000, "the leading and the trailing notify");
  for (let i = 0; i < 200; i++) notifier.poke();
  // Nothing else while the busy window is open: a marker sent now arrives after anything sent before it.
  const marker = crypto.randomUUID();
  await db.sql`select pg_notify(${OUTBOX_CHANNEL}, ${marker})`;
  await waitUntil(() => markers.has(marker), 10_000, "the marker notify");
  expect(notifies).toHaveLength(2);
  // The pokes of the busy window are owed their notify, sent at its end (here: close()).
  expect(await allNotifiesOf(notifier)).toHaveLength(3);
});

test("pokes at 200 a second keep the short window: the last poke is followed by a notify without close()", async () => {
  notifies.length = 0;
  const notifier = createOutboxNotifier(db.sql, 2, undefined, LONG_WINDOW_MS);
  const started = performance.now();
  let lastPoke = started;
  // The load under test: a poke every 5 ms for 250 ms. Had the busy window opened, every poke
  // after it would wait for close().
  for (let i = 0; i < 50; i++) {
    await waitUntil(() => performance.now() >= started + i * 5, 2000, "the next poke's time", 1);
    lastPoke = performance.now();
    notifier.poke();
  }
  await waitUntil(() => notifies.length > 0 && notifies.at(-1)! >= lastPoke, 5000, "a notify after the last poke");
  // About one per poke: two pokes in one 2 ms window (a stalled test process) share one.
  expect((await allNotifiesOf(notifier)).length).toBeGreaterThanOrEqual(25);
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

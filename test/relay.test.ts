// The relay against real Postgres and a real broker: what reaches a subscriber, what the
// rows say afterwards. The only fake is an injected failing publish function.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import postgres from "postgres";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { requeue } from "../lib/ops/sql.ts";
import { connectBroker, type Broker, type PublishFn } from "../lib/relay/publisher.ts";
import { createRelay, laneCount, type Relay, type RelayOptions } from "../lib/relay/loop.ts";
import { createOutboxNotifier } from "../lib/platform/wakeup.ts";
import { CHARGE_CREATED } from "../lib/charges/events.ts";
import { countWhere, insertCharge, insertPending } from "../testkit/outbox.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { freshDatabase, services } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay");
const { mqttUrl, mqtt5 } = await services();
const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let collector: Collector;

beforeEach(async () => {
  await db.sql`truncate outbox, inbox, refunds, charges`;
  prefix = `test/${crypto.randomUUID()}/`;
  collector = await collect(mqttUrl, prefix);
  cleanups.push(() => collector.close());
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

async function connectedBroker(): Promise<Broker> {
  const broker = connectBroker(mqttUrl);
  cleanups.push(() => broker.close());
  await waitUntil(() => broker.connected, 5000, "broker connection");
  return broker;
}

/** A relay on its own pool and broker connection, stopped after the test. */
async function startRelay(options: Partial<RelayOptions> = {}): Promise<Relay> {
  const batchSize = options.batchSize ?? 50;
  const sql: Sql = options.sql ?? createSql(db.url, { max: laneCount(batchSize) + 1, applicationName: "relay-test" });
  if (!options.sql) cleanups.push(() => sql.end({ timeout: 5 }));
  const broker = options.broker ?? (await connectedBroker());
  const relay = createRelay({ sql, broker, batchSize, pollMs: 5000, topicPrefix: prefix, ...options });
  cleanups.push(() => relay.stop());
  return relay;
}

async function outboxRow(id: string) {
  const [row] = await db.sql<{ published: boolean; attempts: number; last_error: string | null; backing_off: boolean; parked: boolean }[]>`
    select published_at is not null as published, attempts, last_error,
           coalesce(next_attempt_at > now(), false) as backing_off, parked_at is not null as parked
    from outbox where id = ${id}`;
  if (!row) throw new Error(`no outbox row ${id}`);
  return row;
}

test("pending rows are each published once, oldest first, with the exact envelope and MQTT 5 properties", async () => {
  const rows = await insertPending(db.sql, 120);
  await db.sql`update outbox set traceparent = ${TRACEPARENT} where id = ${rows[0]!.id}`;
  const relay = await startRelay();
  void relay.run();
  const received = await collector.waitFor(rows.length);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row published");
  await relay.stop();

  expect(collector.ids()).toEqual(rows.map((r) => r.id));
  rows.forEach((row, i) => {
    const message = received[i]!;
    expect(message.topic).toBe(`${prefix}charges/ChargeCreated`);
    expect(message.packet.qos).toBe(1);
    expect(message.packet.retain).toBe(false);
    expect(Object.keys(message.body)).toEqual(["id", "type", "aggregateId", "tenantId", "createdAt", "sequence", "data"]);
    // The rows are inserted without a tenant or a sequence: the columns' defaults, as for rows
    // from before tenants and sequences (a charge's ChargeCreated is its first event, 1).
    expect(message.body).toEqual({
      id: row.id,
      type: "ChargeCreated",
      aggregateId: row.aggregateId,
      tenantId: "default",
      createdAt: row.createdAt,
      sequence: 1,
      data: { chargeId: row.aggregateId, amountCents: row.amountCents },
    });
    if (!mqtt5) return;
    expect(message.packet.properties?.contentType).toBe("application/json");
    expect(message.packet.properties?.userProperties).toEqual({
      "event-id": row.id,
      "event-type": "ChargeCreated",
      "tenant-id": "default",
      "aggregate-sequence": "1",
      ...(i === 0 ? { traceparent: TRACEPARENT } : {}),
    });
  });
  expect(await countWhere(db.sql, "published")).toBe(rows.length);
  expect(await countWhere(db.sql, "attempted")).toBe(0);
});

test("runOnce claims one batch, oldest first, and returns how many it published", async () => {
  const rows = await insertPending(db.sql, 60);
  const relay = await startRelay({ batchSize: 25 });
  expect(await relay.runOnce()).toBe(25);
  expect(await countWhere(db.sql, "published")).toBe(25);
  expect(await relay.runOnce()).toBe(25);
  expect(await relay.runOnce()).toBe(10);
  expect(await relay.runOnce()).toBe(0);
  await collector.waitFor(60);
  expect(collector.ids()).toEqual(rows.map((r) => r.id));
});

test("a committed charge reaches a subscriber through the wake-up, never waiting for the poll", async () => {
  // A poll far longer than the test: only the notify can make the relay publish.
  const relay = await startRelay({ pollMs: 3_600_000 });
  void relay.run();
  await waitUntil(() => relay.listening && relay.state === "idle", 5000, "relay idle and listening");
  const notifier = createOutboxNotifier(db.sql);
  cleanups.push(() => notifier.close());

  const latencies: number[] = [];
  for (let i = 0; i < 20; i++) {
    const row = await insertCharge(db.sql); // committed
    const committed = performance.now();
    notifier.poke();
    const [message] = (await collector.waitFor(i + 1, 10_000)).slice(i);
    expect(message?.body.id).toBe(row.id);
    latencies.push(message!.at - committed);
  }
  latencies.sort((a, b) => a - b);
  console.log(`commit → subscriber: p50 ${latencies[10]!.toFixed(1)} ms, max ${latencies[19]!.toFixed(1)} ms`);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 2000, "the last row marked");
});

test("a publish that throws leaves the row pending with the attempt and error recorded; a later round publishes it", async () => {
  const [row] = await insertPending(db.sql, 1);
  let calls = 0;
  // Throws on the first call, rejects on the later ones.
  const failing: PublishFn = () => {
    calls += 1;
    if (calls === 1) throw new Error("injected: publish threw");
    return Promise.reject(new Error("injected: publish rejected"));
  };
  const relay = await startRelay({ publish: failing, retry: { baseSeconds: 0.5 } });

  expect(await relay.runOnce()).toBe(0);
  let state = await outboxRow(row!.id);
  expect(state).toMatchObject({ published: false, attempts: 1, backing_off: true, parked: false });
  expect(state.last_error).toContain("publish threw");
  expect(await relay.runOnce()).toBe(0); // still backing off: not claimed, no attempt
  expect(calls).toBe(1);

  await waitUntil(async () => !(await outboxRow(row!.id)).backing_off, 3000, "back-off to pass");
  expect(await relay.runOnce()).toBe(0);
  state = await outboxRow(row!.id);
  expect(state).toMatchObject({ published: false, attempts: 2, parked: false });
  expect(state.last_error).toContain("publish rejected");
  expect(collector.messages).toHaveLength(0);

  const real = await startRelay();
  await waitUntil(async () => (await real.runOnce()) === 1, 5000, "a later round to publish it");
  expect((await collector.waitFor(1)).map((m) => m.body.id)).toEqual([row!.id]);
  expect(await outboxRow(row!.id)).toMatchObject({ published: true, attempts: 2 });
});

test("a PUBACK reason code that will never succeed parks the row at once; requeue puts it back", async () => {
  const [row, other] = await insertPending(db.sql, 2);
  const notAuthorized: PublishFn = (message) =>
    JSON.parse(message.payload).id === row!.id
      ? Promise.reject(Object.assign(new Error("Publish error: Not authorized"), { code: 0x87 }))
      : Promise.resolve();
  expect(await (await startRelay({ publish: notAuthorized })).runOnce()).toBe(1);
  const state = await outboxRow(row!.id);
  expect(state).toMatchObject({ published: false, attempts: 1, parked: true });
  expect(state.last_error).toContain("0x87");
  expect((await outboxRow(other!.id)).published).toBe(true);

  const real = await startRelay();
  await db.sql`update outbox set next_attempt_at = null where id = ${row!.id}`; // only parked_at holds it now
  expect(await real.runOnce()).toBe(0);
  expect(await requeue(db.sql, row!.id)).toBe(1);
  expect(await requeue(db.sql, row!.id)).toBe(0); // no longer parked
  expect(await real.runOnce()).toBe(1);
  expect((await collector.waitFor(1)).map((m) => m.body.id)).toEqual([row!.id]);
  expect(await outboxRow(row!.id)).toMatchObject({ published: true, attempts: 0, parked: false });
});

test("after the last allowed attempt the row is parked; requeue('all') puts every parked row back", async () => {
  const rows = await insertPending(db.sql, 3);
  const failing = await startRelay({ publish: () => Promise.reject(new Error("injected")), retry: { maxAttempts: 2, baseSeconds: 0 } });
  expect(await failing.runOnce()).toBe(0);
  expect(await countWhere(db.sql, "parked")).toBe(0);
  expect(await failing.runOnce()).toBe(0);
  expect(await countWhere(db.sql, "parked")).toBe(3);
  expect(await failing.runOnce()).toBe(0); // parked rows are not claimed
  expect((await outboxRow(rows[0]!.id)).attempts).toBe(2);

  expect(await requeue(db.sql, "all")).toBe(3);
  expect(await requeue(db.sql, "not-a-uuid")).toBe(0);
  expect(await (await startRelay()).runOnce()).toBe(3);
  await collector.waitFor(3);
  expect(collector.ids()).toEqual(rows.map((r) => r.id));
});

test("a row whose payload is not JSON is parked and does not hold up the others", async () => {
  const rows = await insertPending(db.sql, 3);
  await db.sql`update outbox set payload = 'not json' where id = ${rows[1]!.id}`;
  const relay = await startRelay();
  void relay.run();
  await collector.waitFor(2);
  await waitUntil(async () => (await outboxRow(rows[1]!.id)).parked, 5000, "the bad row parked");
  expect((await outboxRow(rows[1]!.id)).last_error).toContain("not valid JSON");
  expect(collector.ids()).toEqual([rows[0]!.id, rows[2]!.id]);
});

test("the collection pacer hears of every row answered, published or parked, once", async () => {
  const rows = await insertPending(db.sql, 130);
  await db.sql`update outbox set payload = 'not json' where id = ${rows[7]!.id}`;
  let answered = 0;
  const relay = await startRelay({ pacer: { count: (units) => void (answered += units) } });
  void relay.run();
  await collector.waitFor(rows.length - 1);
  await waitUntil(async () => (await outboxRow(rows[7]!.id)).parked, 5000, "the bad row parked");
  await relay.stop();
  expect(answered).toBe(rows.length);
});

test("two relays draining the same 1,000 rows publish every row exactly once and share the work", async () => {
  const rows = await insertPending(db.sql, 1000);
  const published = [0, 0];
  // Deterministic sharing: the first relay's first publish waits until the second relay has
  // published, so both take part whatever the scheduler does. Rows the first one holds
  // claimed meanwhile are skipped (SKIP LOCKED), never published twice.
  let secondPublished = (): void => {};
  const second = new Promise<void>((resolve) => (secondPublished = resolve));
  const brokers = [await connectedBroker(), await connectedBroker()];
  const publishers: PublishFn[] = [
    async (message) => {
      await second;
      return brokers[0]!.publish(message);
    },
    async (message) => {
      await brokers[1]!.publish(message);
      secondPublished();
    },
  ];
  const relays = await Promise.all(
    [0, 1].map((n) =>
      startRelay({ broker: brokers[n], publish: publishers[n], events: { onPublished: (_topic, lags) => (published[n]! += lags.length) } }),
    ),
  );
  for (const relay of relays) void relay.run();
  await collector.waitFor(1000, 15_000);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked");
  await Promise.all(relays.map((relay) => relay.stop()));
  await collector.barrier(); // a duplicate sent before it has arrived by now

  const ids = collector.ids();
  expect(ids).toHaveLength(1000);
  expect(new Set(ids).size).toBe(1000);
  expect(new Set(ids)).toEqual(new Set(rows.map((r) => r.id)));
  expect(published[0]! + published[1]!).toBe(1000);
  expect(published[0]).toBeGreaterThan(0);
  expect(published[1]).toBeGreaterThan(0);
});

test("stop() lets the batch in flight finish: its rows are published and marked", async () => {
  const rows = await insertPending(db.sql, 10);
  const broker = await connectedBroker();
  let calls = 0;
  // The batch's publishes wait here until stop() has been called.
  let release = (): void => {};
  const stopRequested = new Promise<void>((resolve) => (release = resolve));
  const held: PublishFn = async (message) => {
    calls += 1;
    await stopRequested;
    return broker.publish(message);
  };
  const relay = await startRelay({ broker, publish: held });
  const running = relay.run();
  await waitUntil(() => calls > 0, 5000, "the batch claimed and its first publish under way");
  const stopping = relay.stop();
  release();
  await stopping;
  await running;
  expect(relay.state).toBe("stopped");
  expect(calls).toBe(rows.length);
  expect(await countWhere(db.sql, "published")).toBe(rows.length);
  await collector.waitFor(rows.length);
  expect(collector.ids()).toEqual(rows.map((r) => r.id));
});

test("a backlog at a small OUTBOX_BATCH_SIZE is claimed in claims of the cap, each row once", async () => {
  // 2,000 ChargeCreated rows at a cap of 10: 200 claims. Each claim after the first starts
  // where the last ended (the frontier), and its window holds the last claim's final row,
  // still locked: a window of 10 that counted it took 9 heads, 223 claims, each published in
  // turn (one row at a time) for being short of the cap.
  const rows = await insertPending(db.sql, 2000);
  const claims: number[] = [];
  const relay = await startRelay({ batchSize: 10, events: { onPublished: (_topic, lags) => claims.push(lags.length) } });
  void relay.run();
  await collector.waitFor(rows.length, 20_000);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked");
  await relay.stop();
  await collector.barrier();

  expect(collector.ids().sort()).toEqual(rows.map((r) => r.id).sort());
  // A claim from the top once a second (claim-lock.ts) may walk past the other lanes' locked
  // rows and take fewer: a few claims of slack, far from one claim in ten more.
  expect(claims.length).toBeLessThanOrEqual(rows.length / 10 + 5);
  expect(claims.filter((n) => n === 10).length).toBeGreaterThanOrEqual(rows.length / 10 - 5);
});

test("a ChargeCreated backlog is claimed from the frontier without a window, which only the claims from the top walk", async () => {
  // The window bounds a walk past rows that are no heads (a chain in flight); a backlog of
  // ChargeCreated rows has none, and walking a window a second time for its figures made small
  // claims slower than 1ff5455's (bench/README.md). The claim from the top, the
  // first and one a second, still walks its window and so notices a backlog of another shape.
  const rows = await insertPending(db.sql, 2000);
  const claims: string[] = [];
  const sql = postgres(db.url, {
    max: laneCount(10) + 1,
    onnotice: () => {},
    debug: (_connection, query) => void (/for update skip locked/i.test(query) && claims.push(query)),
  }) as unknown as Sql;
  cleanups.push(() => sql.end({ timeout: 5 }));
  const started = performance.now();
  const relay = await startRelay({ batchSize: 10, sql });
  void relay.run();
  await collector.waitFor(rows.length, 20_000);
  await relay.stop();
  const seconds = (performance.now() - started) / 1000;

  const windowed = claims.filter((q) => /with w as materialized/i.test(q)).length;
  const unbounded = claims.filter((q) => !/with w as materialized/i.test(q) && /from outbox o/i.test(q)).length;
  expect(windowed + unbounded).toBeGreaterThanOrEqual(rows.length / 10);
  // The first claim and the one from the top each second (and after a short claim, the drain's last).
  expect(windowed).toBeLessThanOrEqual(2 + Math.ceil(seconds) * 2);
  expect(unbounded).toBeGreaterThanOrEqual(rows.length / 10 - windowed);
});

test("against a slow broker the claims stay small enough that no row times out or is delivered twice", async () => {
  // A broker that acknowledges 400 publishes a second (remote, or with a small Receive
  // Maximum), and a publish timeout of 1 s: claims growing to the cap would reach 320 rows,
  // 0.8 s of the broker's time, queued behind the other lanes' rows.
  const ACKS_PER_SECOND = 400;
  const publishTimeoutMs = 1000;
  const rows = await insertPending(db.sql, 1000);
  const broker = await connectedBroker();
  let nextSlot = 0;
  const slow: PublishFn = async (message) => {
    const slot = Math.max(performance.now(), nextSlot);
    nextSlot = slot + 1000 / ACKS_PER_SECOND;
    await sleep(slot - performance.now()); // pacing the simulated broker, not synchronizing
    return broker.publish(message);
  };
  const claims: number[] = [];
  const relay = await startRelay({ broker, publish: slow, batchSize: 500, publishTimeoutMs, events: { onPublished: (_topic, lags) => claims.push(lags.length) } });
  void relay.run();
  await collector.waitFor(rows.length, 15_000);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked");
  await relay.stop();

  expect(await countWhere(db.sql, "attempted")).toBe(0);
  expect(collector.ids()).toEqual(rows.map((r) => r.id));
  // The claims did grow past the first one, and stopped well short of the cap.
  expect(Math.max(...claims)).toBeGreaterThan(10);
  expect(Math.max(...claims)).toBeLessThanOrEqual(80);
});

test("a row that commits behind a drain's claims (an older created_at) is published in that drain", async () => {
  const broker = await connectedBroker();
  let handedOver = 0;
  let straggler: string | undefined;
  // Mid-drain, once the claims have grown to the cap and each starts where the last ended:
  // a row created an hour ago commits now (its transaction ran long), behind all of them.
  const publish: PublishFn = async (message) => {
    handedOver += 1;
    if (handedOver === 1500) straggler = await insertCreatedAnHourAgo();
    return broker.publish(message);
  };
  // No poll and no NOTIFY during the drain: only its own claims can find the row. One lane,
  // so that no other lane's claim from the top finds it by chance.
  const relay = await startRelay({ broker, publish, batchSize: 500, lanes: 1, pollMs: 600_000 });
  void relay.run();
  // LISTEN wakes the relay once in place (for rows committed before it): let that pass first.
  await waitUntil(() => relay.listening && relay.state === "idle", 5000, "the relay listening and idle");
  const rows = await insertPending(db.sql, 3000);
  relay.wake();
  await collector.waitFor(rows.length + 1, 15_000);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked");
  await relay.stop();
  await collector.barrier();

  expect(straggler).toBeDefined();
  expect(collector.ids().sort()).toEqual([...rows.map((r) => r.id), straggler as string].sort());
});

async function insertCreatedAnHourAgo(): Promise<string> {
  const [row] = await db.sql<{ id: string }[]>`
    with c as (
      insert into charges (id, amount_cents, created_at) values (gen_random_uuid(), 100, now() - interval '1 hour')
      returning id, amount_cents, created_at
    )
    insert into outbox (id, aggregate_id, event_type, payload, created_at)
    select gen_random_uuid(), c.id, ${CHARGE_CREATED}, json_build_object('chargeId', c.id, 'amountCents', c.amount_cents)::text, c.created_at
    from c
    returning id`;
  if (!row) throw new Error("the row was not inserted");
  return row.id;
}

// The reference subscriber against real Postgres and a real broker, fed by the real relay.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, type Relay } from "../lib/relay/loop.ts";
import { startSubscriber, type Delivery, type Subscriber, type SubscriberOptions } from "../lib/subscriber/subscriber.ts";
import { CHARGE_CREATED, subscriptionFilter, topicOf } from "../lib/charges/events.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { spawnScript } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("subscriber");
const { mqttUrl } = await services();
await db.sql`create table handled (event_id uuid primary key, amount_cents int not null)`;
const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let consumer = "";

beforeEach(async () => {
  await db.sql`truncate outbox, inbox, refunds, charges, handled`;
  prefix = `test/${crypto.randomUUID()}/`;
  consumer = `test-consumer-${crypto.randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

async function relay(): Promise<Relay> {
  const sql = createSql(db.url, { max: 3 });
  const broker = connectBroker(mqttUrl);
  cleanups.push(() => sql.end(), () => broker.close());
  await waitUntil(() => broker.connected, 5000, "broker connection");
  return createRelay({ sql, broker, batchSize: 50, pollMs: 5000, topicPrefix: prefix });
}

/** A subscriber whose handler records the charge in `handled`, in the inbox's transaction. */
async function subscriber(options: Partial<SubscriberOptions> = {}): Promise<{ sub: Subscriber; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const sub = startSubscriber({
    sql: db.sql,
    mqttUrl,
    topic: subscriptionFilter(prefix),
    consumer,
    handler: async (event, tx) => {
      const { amountCents } = event.data as { amountCents: number };
      await tx`insert into handled (event_id, amount_cents) values (${event.id}, ${amountCents})`;
    },
    onDelivery: (delivery) => deliveries.push(delivery),
    ...options,
  });
  cleanups.push(() => sub.close());
  await sub.ready;
  return { sub, deliveries };
}

async function handledCount(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from handled`;
  return row?.n ?? 0;
}

test("events published while the subscriber is offline arrive when it is back; a redelivered id is processed once", async () => {
  const first = await subscriber();
  await first.sub.close(); // the session, with its subscription, stays at the broker

  const rows = await insertPending(db.sql, 5);
  expect(await (await relay()).runOnce()).toBe(5);

  const { sub, deliveries } = await subscriber();
  await waitUntil(() => sub.processed === 5, 10_000, "the queued events");
  expect(deliveries.map((d) => d.event.id)).toEqual(rows.map((r) => r.id));
  expect(deliveries.every((d) => !d.duplicate)).toBe(true);
  expect(await handledCount()).toBe(5);

  // The relay publishes a row again (as after a crash between PUBACK and UPDATE).
  await db.sql`update outbox set published_at = null where id = ${rows[0]!.id}`;
  expect(await (await relay()).runOnce()).toBe(1);
  await waitUntil(() => sub.processed === 6, 10_000, "the redelivery");
  expect(deliveries.at(-1)).toMatchObject({ duplicate: true, event: { id: rows[0]!.id } });
  expect(sub.duplicates).toBe(1);
  expect(await handledCount()).toBe(5); // the handler did not run again
  const [inbox] = await db.sql<{ n: number }[]>`select count(*)::int as n from inbox where consumer = ${consumer}`;
  expect(inbox?.n).toBe(5);
});

test("a handler that fails rolls its inbox row back with it; the retry processes the event once", async () => {
  let calls = 0;
  const { sub } = await subscriber({
    handler: async (event, tx) => {
      calls += 1;
      await tx`insert into handled (event_id, amount_cents) values (${event.id}, 1)`;
      if (calls === 1) throw new Error("injected handler failure");
    },
  });
  await insertPending(db.sql, 1);
  expect(await (await relay()).runOnce()).toBe(1);
  await waitUntil(() => sub.processed === 1, 10_000, "the event processed");
  expect(calls).toBe(2);
  expect(sub.duplicates).toBe(0);
  expect(await handledCount()).toBe(1);
});

test("a message that is not an event is acknowledged and counted as rejected; the stream goes on", async () => {
  const rejected: string[] = [];
  const { sub } = await subscriber({ onRejected: (_topic, reason) => rejected.push(reason) });
  const client = await rawClient(mqttUrl);
  await client.publishAsync(topicOf(prefix, CHARGE_CREATED), "not json", { qos: 1 });
  await client.publishAsync(topicOf(prefix, CHARGE_CREATED), JSON.stringify({ id: "x", type: CHARGE_CREATED }), { qos: 1 });
  await client.endAsync();
  await insertPending(db.sql, 1);
  expect(await (await relay()).runOnce()).toBe(1);
  await waitUntil(() => sub.processed === 1, 10_000, "the real event after the bad ones");
  expect(sub.rejected).toBe(2);
  expect(rejected).toHaveLength(2);
  expect(await countWhere(db.sql, "pending")).toBe(0);
});

test("examples/reference-subscriber.ts prints one JSON line per event, marks duplicates, and stops cleanly on SIGTERM", async () => {
  const lines: Record<string, unknown>[] = [];
  const child = spawnScript("examples/reference-subscriber.ts", {
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, SUBSCRIBER_CONSUMER: consumer },
    stdout: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  try {
    await waitUntil(() => lines.some((l) => l.event === "ready"), 10_000, "the ready line");
    const rows = await insertPending(db.sql, 2);
    const r = await relay();
    expect(await r.runOnce()).toBe(2);
    await db.sql`update outbox set published_at = null where id = ${rows[1]!.id}`;
    expect(await r.runOnce()).toBe(1);
    await waitUntil(() => lines.filter((l) => l.event === "received").length === 3, 10_000, "three received lines");
    const received = lines.filter((l) => l.event === "received");
    expect(received.map((l) => [l.id, l.duplicate])).toEqual([
      [rows[0]!.id, false],
      [rows[1]!.id, false],
      [rows[1]!.id, true],
    ]);
    expect(received[0]).toMatchObject({ type: "ChargeCreated", aggregateId: rows[0]!.aggregateId });
  } finally {
    child.kill("SIGTERM");
  }
  expect(await child.done).toBe(0);
  expect(lines.at(-1)).toEqual({ event: "stopped", processed: 3, duplicates: 1, rejected: 0 });
});

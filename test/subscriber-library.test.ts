// charges-outbox/subscriber as a user meets it, on real Postgres and a real broker: its own
// tables in an empty database, the handler's writes once per event id, typed events checked on
// receipt (malformed ones kept as dead letters, unknown types counted), stop() mid-handler.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { MqttClient } from "mqtt";
import { buildEnvelope, CHARGE_CREATED, CHARGE_REFUNDED, topicOf } from "../lib/charges/events.ts";
import { createSubscriber, migrateSubscriber, type ChargeEvent, type CreateSubscriberOptions, type SubscriberHandle } from "../lib/subscriber/index.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { adminDatabaseUrl, mqttUrl } = await services();
// An empty database, as a subscriber's own would be: no service migrations.
const db: ScratchDatabase = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "subscriber_library"), { migrate: false });
const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let consumer = "";

beforeEach(async () => {
  await migrateSubscriber(db.sql);
  await db.sql`create table if not exists ledger (event_id uuid primary key, charge_id uuid not null, sequence int not null, kind text not null)`;
  prefix = `test/${crypto.randomUUID()}/`;
  consumer = `lib-${crypto.randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

// What the relay writes: createdAt with microseconds.
const createdAt = (): string => new Date().toISOString().replace("Z", "000Z");

function created(chargeId: string, id: string = crypto.randomUUID()): string {
  return buildEnvelope({ id, type: CHARGE_CREATED, aggregateId: chargeId, tenantId: "t", createdAt: createdAt(), sequence: 1, data: { chargeId, amountCents: 500, currency: "usd" } });
}

function refunded(chargeId: string, sequence: number): string {
  const data = { chargeId, refundId: crypto.randomUUID(), amountCents: 100, refundedCents: 100 * (sequence - 1) };
  return buildEnvelope({ id: crypto.randomUUID(), type: CHARGE_REFUNDED, aggregateId: chargeId, tenantId: "t", createdAt: createdAt(), sequence, data });
}

async function publisher(): Promise<MqttClient> {
  const client = await rawClient(mqttUrl);
  cleanups.push(() => client.endAsync());
  return client;
}

async function start(extra: Partial<CreateSubscriberOptions> = {}): Promise<SubscriberHandle> {
  const sub = createSubscriber({
    mqttUrl,
    sql: db.sql,
    consumer,
    topicPrefix: prefix,
    inboxRetentionSeconds: false,
    handle: async (event: ChargeEvent, tx) => {
      await tx`insert into ledger (event_id, charge_id, sequence, kind) values (${event.id}, ${event.data.chargeId}, ${event.sequence}, ${event.type})`;
    },
    ...extra,
  });
  cleanups.push(() => sub.stop());
  await sub.ready;
  return sub;
}

test("migrateSubscriber creates its tables and ledger in an empty database once, under concurrent callers", async () => {
  const fresh = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "subscriber_migrate"), { migrate: false });
  try {
    const outcomes = await Promise.all([migrateSubscriber(fresh.sql), migrateSubscriber(fresh.sql), migrateSubscriber(fresh.sql)]);
    expect(outcomes.filter((o) => o.kind === "applied")).toEqual([{ kind: "applied", names: ["0001_inbox_sequences_dead_letters"] }]);
    expect(outcomes.filter((o) => o.kind === "current")).toHaveLength(2);
    const tables = await fresh.sql<{ name: string }[]>`select table_name as name from information_schema.tables where table_schema = 'public' order by 1`;
    expect(tables.map((t) => t.name)).toEqual(["charges_outbox_subscriber_migrations", "inbox", "subscriber_dead_letters", "subscriber_held_events", "subscriber_sequences"]);
    // Nothing of the service's schema.
    expect(tables.some((t) => t.name === "outbox" || t.name === "schema_history")).toBe(false);
  } finally {
    await fresh.drop();
  }
});

test("handle gets typed events in per-charge order and its writes commit once per event id, redeliveries included", async () => {
  const sub = await start();
  const pub = await publisher();
  const charge = crypto.randomUUID();
  const first = created(charge);
  // The refund ahead of its charge: held until the charge's event, then handled after it.
  await pub.publishAsync(topicOf(prefix, CHARGE_REFUNDED), refunded(charge, 2), { qos: 1 });
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), first, { qos: 1 });
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), first, { qos: 1 }); // a redelivery
  await waitUntil(() => sub.counts.processed === 3, 10_000, "three settled");
  const rows = await db.sql<{ sequence: number; kind: string }[]>`select sequence, kind from ledger where charge_id = ${charge} order by sequence`;
  expect([...rows]).toEqual([{ sequence: 1, kind: "ChargeCreated" }, { sequence: 2, kind: "ChargeRefunded" }]);
  expect(sub.counts.duplicates).toBe(1);
  expect(sub.counts.held).toBe(1);
});

test("malformed messages are dead letters with their reason and acknowledged; an unknown type is counted; the stream goes on", async () => {
  const unknownSeen: string[] = [];
  const sub = await start({ onUnknown: async (event, tx) => void unknownSeen.push(`${event.type} ${(await tx`select 1 as one`).length}`) });
  const pub = await publisher();
  const topic = topicOf(prefix, CHARGE_CREATED);
  const charge = crypto.randomUUID();
  const wrongField = JSON.parse(created(charge)) as { data: { amountCents: unknown } };
  wrongField.data.amountCents = "five hundred";
  const missing = JSON.parse(created(crypto.randomUUID())) as Record<string, unknown>;
  delete missing.aggregateId;
  const future = { ...JSON.parse(created(charge)), id: crypto.randomUUID(), type: "ChargeDisputed", sequence: 1, data: { chargeId: charge, reason: "fraud" } };
  await pub.publishAsync(topic, "not json {", { qos: 1 });
  await pub.publishAsync(topic, Buffer.from([0xff, 0x00, 0xfe]), { qos: 1 });
  await pub.publishAsync(topic, JSON.stringify(wrongField), { qos: 1 });
  await pub.publishAsync(topic, JSON.stringify(missing), { qos: 1 });
  await pub.publishAsync(topicOf(prefix, "ChargeDisputed"), JSON.stringify(future), { qos: 1 });
  // The charge's next event follows the unknown one in its sequence: not held behind it.
  await pub.publishAsync(topicOf(prefix, CHARGE_REFUNDED), refunded(charge, 2), { qos: 1 });
  await waitUntil(() => sub.counts.processed === 2, 10_000, "the unknown event and the refund");
  expect(sub.counts.malformed).toBe(4);
  expect(sub.counts.unknown).toBe(1);
  expect(unknownSeen).toEqual(["ChargeDisputed 1"]);
  expect(sub.counts.held).toBe(0);
  const letters = await db.sql<{ error: string }[]>`select error from subscriber_dead_letters where consumer = ${consumer} order by error`;
  expect(letters.map((l) => l.error)).toEqual(["malformed: /aggregateId: Expected required property", "malformed: /data/amountCents: Expected integer", "malformed: not JSON", "malformed: not JSON"]);
  expect([...(await db.sql`select kind from ledger where charge_id = ${charge}`)]).toEqual([{ kind: "ChargeRefunded" }]);
});

test("stop() lets the handler in flight commit and acknowledges it: the next session gets no redelivery", async () => {
  let release: () => void = () => {};
  const inHandler = Promise.withResolvers<void>();
  const gate = new Promise<void>((resolve) => (release = resolve));
  const sub = await start({
    clientId: `${consumer}-a`,
    handle: async (event, tx) => {
      await tx`insert into ledger (event_id, charge_id, sequence, kind) values (${event.id}, ${event.data.chargeId}, ${event.sequence}, ${event.type})`;
      inHandler.resolve();
      await gate;
    },
  });
  const pub = await publisher();
  const charge = crypto.randomUUID();
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), created(charge), { qos: 1 });
  await inHandler.promise;
  const stopped = sub.stop();
  release();
  await stopped;
  expect([...(await db.sql`select kind from ledger where charge_id = ${charge}`)]).toEqual([{ kind: "ChargeCreated" }]);
  // The same session again: a marker published now comes after anything still owed.
  const again = await start({ clientId: `${consumer}-a` });
  const marker = crypto.randomUUID();
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), created(marker), { qos: 1 });
  await waitUntil(() => again.counts.processed >= 1, 10_000, "the marker");
  expect(again.counts.processed).toBe(1);
  expect(again.counts.duplicates).toBe(0);
});

test("a handler that keeps failing: after maxHandlerAttempts its event is a dead letter with the last error; the next event is handled", async () => {
  const poison = crypto.randomUUID();
  let calls = 0;
  const sub = await start({
    maxHandlerAttempts: 2,
    handle: async (event, tx) => {
      if (event.data.chargeId === poison) {
        calls += 1;
        throw new Error("ledger refused it");
      }
      await tx`insert into ledger (event_id, charge_id, sequence, kind) values (${event.id}, ${event.data.chargeId}, ${event.sequence}, ${event.type})`;
    },
  });
  const pub = await publisher();
  const after = crypto.randomUUID();
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), created(poison), { qos: 1 });
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), created(after), { qos: 1 });
  await waitUntil(() => sub.counts.processed === 1, 20_000, "the event after the poison one");
  expect(calls).toBe(2);
  expect(sub.counts.deadLettered).toBe(1);
  const [letter] = await db.sql<{ error: string; attempts: number }[]>`select error, attempts from subscriber_dead_letters where consumer = ${consumer}`;
  expect(letter).toMatchObject({ attempts: 2 });
  expect(letter!.error).toContain("ledger refused it");
});

test("ordered: false handles each event as it arrives: a refund ahead of its charge is not held", async () => {
  const sub = await start({ ordered: false });
  const pub = await publisher();
  const charge = crypto.randomUUID();
  await pub.publishAsync(topicOf(prefix, CHARGE_REFUNDED), refunded(charge, 2), { qos: 1 });
  await pub.publishAsync(topicOf(prefix, CHARGE_CREATED), created(charge), { qos: 1 });
  await waitUntil(() => sub.counts.processed === 2, 10_000, "both events");
  expect(sub.counts.held).toBe(0);
  const rows = await db.sql<{ sequence: number }[]>`select sequence from ledger where charge_id = ${charge}`;
  expect(rows.length).toBe(2);
  expect(await db.sql`select 1 from subscriber_sequences where consumer = ${consumer}`).toHaveLength(0);
});

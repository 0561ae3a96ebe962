// The reference subscriber's per-aggregate order, on real Postgres and a real broker: events
// crafted as the relay publishes them, sent out of order by a raw MQTT client (one client, so
// the subscriber receives them in the order sent). The handler must see each charge's
// sequences in order; what comes ahead of its turn is held, then processed when its
// predecessor comes, or after the gap timeout when it never does.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { MqttClient } from "mqtt";
import { CHARGE, CHARGE_CREATED, subscriptionFilter, topicOf } from "../lib/charges/events.ts";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { createLogger, silentLogger } from "../lib/platform/log.ts";
import { startTelemetry, type Telemetry } from "../lib/platform/telemetry.ts";
import { runInboxRetention } from "../lib/subscriber/inbox-retention.ts";
import { startSubscriber, type Delivery, type Held, type Subscriber, type SubscriberOptions } from "../lib/subscriber/subscriber.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { valueOf } from "../testkit/prometheus.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { chargeEvents, type CraftedEvent } from "../testkit/subscriber.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

// Short, so that a test sees a gap time out; long enough that no ordinary wait reaches it.
const GAP_TIMEOUT_MS = 1000;

const db = await freshDatabase("subscriber_order");
const { mqttUrl } = await services();
// `n` numbers the handler's calls in the order they ran (each commits before the next of its charge may start).
await db.sql`create table handled (n bigserial primary key, event_id uuid not null unique, aggregate_id text not null, sequence int)`;
const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let consumer = "";

beforeEach(async () => {
  await db.sql`truncate handled, inbox, subscriber_dead_letters, subscriber_sequences, subscriber_held_events`;
  prefix = `test/${crypto.randomUUID()}/`;
  consumer = `test-order-${crypto.randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

interface Run {
  readonly sub: Subscriber;
  readonly telemetry: Telemetry;
  /** onDelivery and onHeld, in order, with performance.now() when each was told. */
  readonly deliveries: (Delivery & { at: number })[];
  readonly held: (Held & { at: number })[];
  readonly logs: Record<string, unknown>[];
}

/** A ready subscriber whose handler records each event in `handled` (and throws for the ids in `poison`). */
async function subscriber(options: Partial<SubscriberOptions> & { poison?: Set<string> } = {}): Promise<Run> {
  const telemetry = startTelemetry("subscriber-order-test", undefined, false);
  cleanups.push(() => telemetry.shutdown());
  const run: Run = { sub: undefined as unknown as Subscriber, telemetry, deliveries: [], held: [], logs: [] };
  const sub = startSubscriber({
    sql: db.sql,
    mqttUrl,
    topic: subscriptionFilter(prefix),
    consumer,
    meter: telemetry.provider.getMeter("charges"),
    log: createLogger("warn", "subscriber", (line) => run.logs.push(JSON.parse(line) as Record<string, unknown>)),
    handler: async (event, tx) => {
      if (options.poison?.has(event.id)) throw new Error("refused by the ledger");
      await tx`insert into handled (event_id, aggregate_id, sequence) values (${event.id}, ${event.aggregateId}, ${event.sequence ?? null})`;
    },
    onDelivery: (delivery) => run.deliveries.push({ ...delivery, at: performance.now() }),
    onHeld: (held) => run.held.push({ ...held, at: performance.now() }),
    ...options,
  });
  cleanups.push(() => sub.close());
  await sub.ready;
  return { ...run, sub };
}

async function publish(events: readonly CraftedEvent[]): Promise<void> {
  const client: MqttClient = await rawClient(mqttUrl);
  try {
    for (const e of events) await client.publishAsync(e.topic, e.payload, { qos: 1 });
  } finally {
    await client.endAsync();
  }
}

/** The sequences the handler processed for a charge, in the order it ran. */
async function handled(aggregateId: string): Promise<(number | null)[]> {
  const rows = await db.sql<{ sequence: number | null }[]>`select sequence from handled where aggregate_id = ${aggregateId} order by n`;
  return rows.map((r) => r.sequence);
}

async function heldRows(): Promise<{ aggregate_id: string; sequence: number; topic: string; payload: string }[]> {
  return [...(await db.sql<{ aggregate_id: string; sequence: number; topic: string; payload: string }[]>`
    select aggregate_id, sequence, topic, payload from subscriber_held_events where consumer = ${consumer} order by aggregate_id, sequence`)];
}

async function lastSequence(aggregateId: string): Promise<number | undefined> {
  const [row] = await db.sql<{ last: number }[]>`
    select last_sequence as last from subscriber_sequences where consumer = ${consumer} and aggregate_type = ${CHARGE} and aggregate_id = ${aggregateId}`;
  return row?.last;
}

async function metric(run: Run, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  return valueOf(await (await run.telemetry.scrape()).text(), name, { consumer, ...labels });
}

const warnings = (run: Run, msg: string) => run.logs.filter((l) => l.msg === msg);

test("a charge's events out of order: the handler sees 1, 2, 3, 4; what came ahead of its turn is held, acknowledged, logged and counted until its predecessor comes", async () => {
  const first = await subscriber();
  const [a1, a2, a3, a4] = chargeEvents(prefix, 4);
  const [b1] = chargeEvents(prefix, 1);
  // a3 twice: a redelivery of an event already held. b1 last: once it is processed, all before it are settled.
  await publish([a1!, a3!, a3!, a4!, b1!]);
  await waitUntil(async () => (await handled(b1!.aggregateId)).length === 1, 10_000, "b1 processed");

  expect(await handled(a1!.aggregateId)).toEqual([1]);
  expect(await lastSequence(a1!.aggregateId)).toBe(1);
  expect(await heldRows()).toEqual([
    { aggregate_id: a1!.aggregateId, sequence: 3, topic: a3!.topic, payload: a3!.payload },
    { aggregate_id: a1!.aggregateId, sequence: 4, topic: a4!.topic, payload: a4!.payload },
  ]);
  expect(first.sub.held).toBe(2);
  expect(first.held.map((h) => [h.event.id, h.expected])).toEqual([[a3!.id, 2], [a4!.id, 2]]);
  expect(warnings(first, "event ahead of its turn held")).toEqual([
    expect.objectContaining({ level: "warn", component: "subscriber", consumer, aggregateType: CHARGE, aggregateId: a1!.aggregateId, eventId: a3!.id, expectedSequence: 2, receivedSequence: 3 }),
    expect.objectContaining({ aggregateId: a1!.aggregateId, eventId: a4!.id, expectedSequence: 2, receivedSequence: 4 }),
  ]);
  expect(await metric(first, "subscriber_sequence_gaps_total", { outcome: "held" })).toBe(2);
  expect(await metric(first, "subscriber_sequence_gaps_total", { outcome: "released_after_timeout" })).toBe(0);
  await waitUntil(async () => (await metric(first, "subscriber_held_events")) === 2, 10_000, "the held gauge at 2");

  // Held means acknowledged: a new session of the same consumer gets a2, and not a3 again.
  await first.sub.close();
  await publish([a2!]);
  const second = await subscriber();
  await waitUntil(async () => (await handled(a1!.aggregateId)).length === 4, 10_000, "a2, then the held a3 and a4");
  expect(await handled(a1!.aggregateId)).toEqual([1, 2, 3, 4]);
  expect(second.deliveries.map((d) => [d.event.id, d.held, d.duplicate, d.gapSkipped])).toEqual([
    [a2!.id, false, false, false],
    [a3!.id, true, false, false],
    [a4!.id, true, false, false],
  ]);
  expect(await heldRows()).toEqual([]);
  expect(await lastSequence(a1!.aggregateId)).toBe(4);
  expect(await metric(second, "subscriber_events_total", { outcome: "processed" })).toBe(3);
  await waitUntil(async () => (await metric(second, "subscriber_held_events")) === 0, 10_000, "the held gauge back at 0");
});

test("a predecessor that never comes: after the gap timeout the held events are processed in sequence order, counted and logged; the missing one coming later is a dead letter, not processed out of order", async () => {
  const run = await subscriber({ gapTimeoutMs: GAP_TIMEOUT_MS });
  const [a1, a2, a3, a4] = chargeEvents(prefix, 4);
  // A charge whose ChargeCreated this consumer never gets (it started after it was published).
  const [, c2, c3] = chargeEvents(prefix, 3);
  await publish([a1!, a4!, a3!, c3!, c2!]);
  await waitUntil(() => run.sub.held === 4, 10_000, "four events held");
  await waitUntil(async () => (await handled(c2!.aggregateId)).length === 2 && (await handled(a1!.aggregateId)).length === 3, 15_000, "the gaps released");

  expect(await handled(a1!.aggregateId)).toEqual([1, 3, 4]);
  expect(await handled(c2!.aggregateId)).toEqual([2, 3]);
  const byId = new Map(run.deliveries.map((d) => [d.event.id, d]));
  expect([a3, a4, c2, c3].map((e) => [byId.get(e!.id)?.held, byId.get(e!.id)?.gapSkipped])).toEqual([
    [true, true],
    [true, false],
    [true, true],
    [true, false],
  ]);
  // Not before the timeout: a3 waited from a4's hold about that long (the hold's commit and
  // callback come a little after the held_at the timeout counts from).
  const heldA4 = run.held.find((h) => h.event.id === a4!.id)!;
  expect(byId.get(a3!.id)!.at - heldA4.at).toBeGreaterThan(GAP_TIMEOUT_MS - 200);
  expect(run.sub.gapsSkipped).toBe(2);
  const skipped = warnings(run, "sequence gap skipped after the gap timeout");
  expect(skipped.map((l) => [l.aggregateId, l.eventId, l.expectedSequence, l.receivedSequence])).toEqual(
    expect.arrayContaining([
      [a1!.aggregateId, a3!.id, 2, 3],
      [c2!.aggregateId, c2!.id, 1, 2],
    ]),
  );
  expect(skipped).toHaveLength(2);
  for (const line of skipped) expect(line.waitedMs as number).toBeGreaterThanOrEqual(GAP_TIMEOUT_MS);
  expect(await metric(run, "subscriber_sequence_gaps_total", { outcome: "released_after_timeout" })).toBe(2);
  expect(await heldRows()).toEqual([]);
  expect(await lastSequence(a1!.aggregateId)).toBe(4);
  expect(await lastSequence(c2!.aggregateId)).toBe(3);

  // a2 at last: its turn has passed. Kept as a dead letter, acknowledged, never handled.
  await publish([a2!]);
  await waitUntil(() => run.sub.deadLettered === 1, 10_000, "a2 dead-lettered");
  expect(await handled(a1!.aggregateId)).toEqual([1, 3, 4]);
  const letters = await db.sql`select event_id, topic, payload, error, attempts from subscriber_dead_letters where consumer = ${consumer}`;
  expect(letters).toHaveLength(1);
  expect(letters[0]).toMatchObject({ event_id: a2!.id, topic: a2!.topic, payload: a2!.payload, attempts: 0 });
  expect(letters[0]!.error).toStartWith("late: sequence 2 came after its aggregate went on to 4");
  expect(await db.sql`select 1 from inbox where event_id = ${a2!.id}`).toHaveLength(0);
  expect(warnings(run, "event after its skipped turn kept in subscriber_dead_letters")).toEqual([
    expect.objectContaining({ aggregateId: a1!.aggregateId, eventId: a2!.id, lastSequence: 4, receivedSequence: 2 }),
  ]);
  expect(await metric(run, "subscriber_sequence_gaps_total", { outcome: "late" })).toBe(1);
  expect(await metric(run, "subscriber_dead_letters_total")).toBe(1);
});

test("an event dead-lettered in its turn holds its charge's later events; republished once fixed, it is processed and releases them in order", async () => {
  const poison = new Set<string>();
  const run = await subscriber({ poison });
  const [a1, a2, a3] = chargeEvents(prefix, 3);
  poison.add(a2!.id);
  await publish([a1!, a2!, a3!]);
  await waitUntil(() => run.sub.deadLettered === 1 && run.sub.held === 1, 20_000, "a2 dead-lettered, a3 held");
  expect(await handled(a1!.aggregateId)).toEqual([1]);
  expect(await heldRows()).toEqual([expect.objectContaining({ sequence: 3 })]);
  const [letter] = await db.sql<{ event_id: string; attempts: number }[]>`select event_id, attempts from subscriber_dead_letters`;
  expect(letter).toEqual({ event_id: a2!.id, attempts: 5 });

  poison.delete(a2!.id); // the fix, then the operator's republish of the dead letter
  await publish([a2!]);
  await waitUntil(async () => (await handled(a1!.aggregateId)).length === 3, 10_000, "a2 and the held a3");
  expect(await handled(a1!.aggregateId)).toEqual([1, 2, 3]);
  expect(await heldRows()).toEqual([]);
  expect(run.sub.gapsSkipped).toBe(0);
});

test("a held event whose handler keeps failing when its turn comes is a dead letter alone: the event that released it stays processed, the later ones wait", async () => {
  const poison = new Set<string>();
  const run = await subscriber({ poison });
  const [a1, a2, a3, a4] = chargeEvents(prefix, 4);
  poison.add(a3!.id);
  await publish([a1!, a3!, a4!, a2!]);
  await waitUntil(() => run.sub.deadLettered === 1, 20_000, "a3 dead-lettered");
  expect(await handled(a1!.aggregateId)).toEqual([1, 2]);
  expect(await lastSequence(a1!.aggregateId)).toBe(2);
  const letters = await db.sql<{ event_id: string; topic: string; payload: string; attempts: number }[]>`
    select event_id, topic, payload, attempts from subscriber_dead_letters`;
  expect([...letters]).toEqual([{ event_id: a3!.id, topic: a3!.topic, payload: a3!.payload, attempts: 5 }]);
  expect((await heldRows()).map((r) => r.sequence)).toEqual([4]);
  expect(run.deliveries.map((d) => d.event.id)).toEqual([a1!.id, a2!.id]);
});

test("held events whose turn came while no subscriber ran (a crash after their predecessor's commit) are processed by the gap sweep at start", async () => {
  const [a1, a2, a3] = chargeEvents(prefix, 3);
  const aggregateId = a1!.aggregateId;
  // As a subscriber left them that committed a1 and stopped before releasing a2 and a3.
  await db.sql`insert into inbox (event_id, consumer) values (${a1!.id}, ${consumer})`;
  await db.sql`insert into subscriber_sequences (consumer, aggregate_type, aggregate_id, last_sequence) values (${consumer}, ${CHARGE}, ${aggregateId}, 1)`;
  for (const e of [a2!, a3!]) {
    await db.sql`insert into subscriber_held_events (event_id, consumer, aggregate_type, aggregate_id, sequence, topic, payload)
                 values (${e.id}, ${consumer}, ${CHARGE}, ${aggregateId}, ${e.sequence}, ${e.topic}, ${e.payload})`;
  }
  // The default gap timeout (5 minutes): only their turn can release them now.
  const run = await subscriber();
  await waitUntil(async () => (await handled(aggregateId)).length === 2, 10_000, "a2 and a3 released");
  expect(await handled(aggregateId)).toEqual([2, 3]);
  expect(run.deliveries.map((d) => [d.event.id, d.held, d.gapSkipped, d.topic])).toEqual([
    [a2!.id, true, false, a2!.topic],
    [a3!.id, true, false, a3!.topic],
  ]);
  expect(await heldRows()).toEqual([]);
  expect(await lastSequence(aggregateId)).toBe(3);
});

test("an envelope without a sequence (an older relay) is processed in arrival order with no place kept; an event an older subscriber processed is a duplicate, and its charge's place moves on", async () => {
  const legacyCharge = crypto.randomUUID();
  const legacy: CraftedEvent = {
    id: crypto.randomUUID(),
    aggregateId: legacyCharge,
    sequence: 0,
    topic: topicOf(prefix, CHARGE_CREATED),
    payload: JSON.stringify({ id: crypto.randomUUID(), type: CHARGE_CREATED, aggregateId: legacyCharge, createdAt: new Date().toISOString(), data: { amountCents: 1 } }),
  };
  const [m1, m2] = chargeEvents(prefix, 2);
  await db.sql`insert into inbox (event_id, consumer) values (${m1!.id}, ${consumer})`;
  const run = await subscriber();
  await publish([legacy, m1!, m2!]);
  await waitUntil(() => run.sub.processed === 3, 10_000, "three events settled");
  expect(await handled(legacyCharge)).toEqual([null]);
  expect(await handled(m1!.aggregateId)).toEqual([2]);
  expect(run.deliveries.map((d) => [d.duplicate, d.held])).toEqual([
    [false, false],
    [true, false],
    [false, false],
  ]);
  expect(await lastSequence(legacyCharge)).toBeUndefined();
  expect(await lastSequence(m1!.aggregateId)).toBe(2);
  expect(run.sub.held).toBe(0);
});

test("inbox retention leaves the order alone: an aggregate's place and its held events stay, however old", async () => {
  const aggregateId = crypto.randomUUID();
  const [, e2] = chargeEvents(prefix, 2, aggregateId);
  await db.sql`insert into inbox (event_id, consumer, received_at) values (gen_random_uuid(), ${consumer}, now() - interval '30 days')`;
  await db.sql`insert into subscriber_sequences (consumer, aggregate_type, aggregate_id, last_sequence, advanced_at)
               values (${consumer}, ${CHARGE}, ${aggregateId}, 0, now() - interval '30 days')`;
  await db.sql`insert into subscriber_held_events (event_id, consumer, aggregate_type, aggregate_id, sequence, topic, payload, held_at)
               values (${e2!.id}, ${consumer}, ${CHARGE}, ${aggregateId}, 2, ${e2!.topic}, ${e2!.payload}, now() - interval '30 days')`;
  expect(await runInboxRetention(db.sql, 7 * 86_400, silentLogger)).toEqual({ job: "inbox-retention", deleted: 1, batches: 1 });
  expect(await lastSequence(aggregateId)).toBe(0);
  expect(await heldRows()).toHaveLength(1);
});

test("SUBSCRIBER_GAP_TIMEOUT_MS defaults to 5 minutes; 0, a fraction or more than a day is refused by name", () => {
  expect(loadConfig({}).subscriberGapTimeoutMs).toBe(300_000);
  expect(loadConfig({ SUBSCRIBER_GAP_TIMEOUT_MS: "1500" }).subscriberGapTimeoutMs).toBe(1500);
  for (const bad of ["0", "1.5", "86400001"]) {
    expect(() => loadConfig({ SUBSCRIBER_GAP_TIMEOUT_MS: bad })).toThrow(ConfigError);
    expect(() => loadConfig({ SUBSCRIBER_GAP_TIMEOUT_MS: bad })).toThrow(/SUBSCRIBER_GAP_TIMEOUT_MS/);
  }
});

// The reference subscriber's dead letters and inbox retention, on real Postgres and a real broker.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { MqttClient } from "mqtt";
import { startSubscriber, type Subscriber, type SubscriberOptions } from "../lib/subscriber/subscriber.ts";
import { INBOX_DELETE_BATCH, runInboxRetention } from "../lib/subscriber/inbox-retention.ts";
import type { DeadLetter } from "../lib/subscriber/index.ts";
import { buildEnvelope, CHARGE_CREATED, subscriptionFilter, topicOf } from "../lib/charges/events.ts";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { startTelemetry, type Telemetry } from "../lib/platform/telemetry.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { runToExit } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("subscriber_dead_letters");
const { mqttUrl } = await services();
await db.sql`create table handled (event_id uuid primary key)`;
const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let consumer = "";

beforeEach(async () => {
  await db.sql`truncate inbox, subscriber_dead_letters, handled`;
  prefix = `test/${crypto.randomUUID()}/`;
  consumer = `test-dead-letters-${crypto.randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

function envelope(id: string): string {
  return buildEnvelope({ id, type: CHARGE_CREATED, aggregateId: crypto.randomUUID(), tenantId: "tenant-a", createdAt: new Date().toISOString(), sequence: 1, data: { amountCents: 100 } });
}

async function publisher(): Promise<MqttClient> {
  const client = await rawClient(mqttUrl);
  cleanups.push(() => client.endAsync());
  return client;
}

interface Recorded {
  readonly sub: Subscriber;
  /** What happened, in order: "delivered <id>" or "dead <id>". */
  readonly log: string[];
}

/** A ready subscriber on this test's prefix and consumer, running `handler` and recording what happened. */
async function recordingSubscriber(telemetry: Telemetry, handler: SubscriberOptions["handler"]): Promise<Recorded> {
  const log: string[] = [];
  const sub = startSubscriber({
    sql: db.sql,
    mqttUrl,
    topic: subscriptionFilter(prefix),
    consumer,
    meter: telemetry.provider.getMeter("charges"),
    handler,
    onDelivery: ({ event }) => log.push(`delivered ${event.id}`),
    onDeadLetter: (letter: DeadLetter) => log.push(`dead ${letter.eventId}`),
  });
  cleanups.push(() => sub.close());
  await sub.ready;
  return { sub, log };
}

interface Run extends Recorded {
  readonly poisonCalls: () => number;
}

/** A subscriber whose handler always throws for `poison` and records every other event. */
async function subscriber(poison: string, telemetry: Telemetry): Promise<Run> {
  let poisonCalls = 0;
  const recorded = await recordingSubscriber(telemetry, async (event, tx) => {
    if (event.id === poison) {
      poisonCalls += 1;
      throw new Error("amount refused by the ledger");
    }
    await tx`insert into handled (event_id) values (${event.id})`;
  });
  return { ...recorded, poisonCalls: () => poisonCalls };
}

test("a handler that always throws: after its budget the event is in subscriber_dead_letters with the error, counted, acknowledged; the stream goes on", async () => {
  const telemetry = startTelemetry("dead-letter-test", undefined, false);
  cleanups.push(() => telemetry.shutdown());
  const poison = crypto.randomUUID();
  const next = crypto.randomUUID();
  const topic = topicOf(prefix, CHARGE_CREATED);
  const first = await subscriber(poison, telemetry);
  const mqtt = await publisher();
  await mqtt.publishAsync(topic, envelope(poison), { qos: 1 });
  await mqtt.publishAsync(topic, envelope(next), { qos: 1 });

  await waitUntil(() => first.log.length === 2, 20_000, "the dead letter and the next event");
  expect(first.log).toEqual([`dead ${poison}`, `delivered ${next}`]);
  expect(first.poisonCalls()).toBe(5);
  expect(first.sub.deadLettered).toBe(1);
  expect(first.sub.rejected).toBe(0);

  const rows = await db.sql`select event_id, consumer, topic, payload, error, attempts, dead_at from subscriber_dead_letters`;
  expect(rows).toHaveLength(1);
  expect(rows[0]).toMatchObject({ event_id: poison, consumer, topic, attempts: 5 });
  expect(rows[0]!.error).toContain("amount refused by the ledger");
  expect(JSON.parse(rows[0]!.payload)).toMatchObject({ id: poison, type: CHARGE_CREATED });
  expect(rows[0]!.dead_at).toBeInstanceOf(Date);
  // Not processed: no inbox row, nothing handled; the next event was.
  const inbox = await db.sql<{ event_id: string }[]>`select event_id from inbox where consumer = ${consumer}`;
  expect(inbox.map((r) => r.event_id)).toEqual([next]);

  const metrics = await (await telemetry.scrape()).text();
  expect(metrics).toMatch(new RegExp(`^subscriber_dead_letters_total\\{consumer="${consumer}"\\} 1$`, "m"));

  // Acknowledged once written: the same session, resumed, does not get the poison again.
  // The proof is positive: an event published after it arrives, and the poison did not come first.
  await first.sub.close();
  const later = crypto.randomUUID();
  await mqtt.publishAsync(topic, envelope(later), { qos: 1 });
  const second = await subscriber(poison, telemetry);
  await waitUntil(() => second.log.length === 1, 10_000, "the event published while away");
  expect(second.log).toEqual([`delivered ${later}`]);
  expect(second.poisonCalls()).toBe(0);
});

test("the handler's budget counts its own failures only: after more database refusals than the budget, one failure is retried, not dead-lettered", async () => {
  const telemetry = startTelemetry("dead-letter-test", undefined, false);
  cleanups.push(() => telemetry.shutdown());
  const id = crypto.randomUUID();
  let calls = 0;
  const { log } = await recordingSubscriber(telemetry, async (event, tx) => {
    calls += 1;
    // A real statement_timeout (57014, the database not serving now), once more than the budget.
    if (calls <= 5) {
      await tx`set local statement_timeout = 1`;
      await tx`select pg_sleep(1)`;
    }
    if (calls === 6) throw new Error("amount refused by the ledger");
    await tx`insert into handled (event_id) values (${event.id})`;
  });
  const mqtt = await publisher();
  await mqtt.publishAsync(topicOf(prefix, CHARGE_CREATED), envelope(id), { qos: 1 });

  await waitUntil(() => log.length === 1, 20_000, "the event settled");
  expect(log).toEqual([`delivered ${id}`]);
  expect(calls).toBe(7);
  const handled = await db.sql<{ event_id: string }[]>`select event_id from handled`;
  expect(handled.map((r) => r.event_id)).toEqual([id]);
  expect(await db.sql`select 1 from subscriber_dead_letters`).toHaveLength(0);
});

test("inbox retention deletes only rows older than the retention, in bounded batches", async () => {
  const old = INBOX_DELETE_BATCH * 2 + 500;
  await db.sql`insert into inbox (event_id, consumer, received_at)
               select gen_random_uuid(), 'c', now() - interval '8 days' from generate_series(1, ${old})`;
  await db.sql`insert into inbox (event_id, consumer, received_at) values
               (gen_random_uuid(), 'c', now() - interval '6 days'),
               (gen_random_uuid(), 'c', now())`;
  const weekS = 7 * 86_400;
  expect(await runInboxRetention(db.sql, weekS, silentLogger)).toEqual({ job: "inbox-retention", deleted: old, batches: 3 });
  const [left] = await db.sql<{ n: number; oldest: number }[]>`
    select count(*)::int as n, extract(epoch from now() - min(received_at))::float8 as oldest from inbox`;
  expect(left?.n).toBe(2);
  expect(left!.oldest).toBeLessThan(weekS);

  // As an operator runs it: the rows left are within the default week, so none goes.
  const run = await runToExit(["bun", "run", "--silent", "ops", "inbox-retention"], { DATABASE_URL: db.url, LOG_LEVEL: "warn" });
  expect(run.code).toBe(0);
  expect(JSON.parse(run.stdout)).toEqual({ job: "inbox-retention", deleted: 0, batches: 1 });
  await db.sql`update inbox set received_at = now() - interval '8 days'`;
  const again = await runToExit(["bun", "run", "--silent", "ops", "inbox-retention"], { DATABASE_URL: db.url, LOG_LEVEL: "warn" });
  expect(JSON.parse(again.stdout)).toEqual({ job: "inbox-retention", deleted: 2, batches: 1 });
});

test("SUBSCRIBER_INBOX_RETENTION_SECONDS defaults to 7 days; less than the one-day MQTT session is refused by name", () => {
  expect(loadConfig({}).subscriberInboxRetentionSeconds).toBe(7 * 86_400);
  expect(loadConfig({ SUBSCRIBER_INBOX_RETENTION_SECONDS: "86400" }).subscriberInboxRetentionSeconds).toBe(86_400);
  expect(() => loadConfig({ SUBSCRIBER_INBOX_RETENTION_SECONDS: "3600" })).toThrow(ConfigError);
  expect(() => loadConfig({ SUBSCRIBER_INBOX_RETENTION_SECONDS: "3600" })).toThrow(/SUBSCRIBER_INBOX_RETENTION_SECONDS/);
});

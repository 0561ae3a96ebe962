// Per-aggregate order at the broker: for every aggregate, the first receipt of its events at a
// subscriber is sequence 1, 2, 3, … under every condition the relay supports: adaptive claims
// over several connections, two relays, a publish that fails and backs off, a parked row and
// its requeue, a relay SIGKILLed mid-batch, a broker restart. The only fake is an injected
// failing publish function.
import { expect, setDefaultTimeout, test } from "bun:test";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { requeue, pendingStats } from "../lib/ops/sql.ts";
import { connectBroker, type Broker, type PublishFn } from "../lib/relay/publisher.ts";
import { createRelay, laneCount, type Relay, type RelayOptions } from "../lib/relay/loop.ts";
import { countWhere, insertChains, type Chain } from "../testkit/outbox.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { firstReceiptOrder } from "../testkit/order.ts";
import { mosquittoInstalled, privateMosquitto, unboundedBroker } from "../testkit/mosquitto.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { relayTestContext } from "../testkit/relay-context.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const ctx = await relayTestContext("relay_order");
const { db, cleanups } = ctx;

async function connectedBroker(url: string, connections = 1): Promise<Broker> {
  const broker = connectBroker(url, { connections });
  cleanups.push(() => broker.close());
  await waitUntil(() => broker.connected, 5000, "broker connection");
  return broker;
}

/** A relay on its own pool, stopped after the test. */
function startRelay(broker: Broker, options: Partial<RelayOptions> = {}): Relay {
  const batchSize = options.batchSize ?? 50;
  const sql: Sql = createSql(db.url, { max: laneCount(batchSize) + 1, applicationName: "relay-order-test" });
  const relay = createRelay({ sql, broker, batchSize, pollMs: 100, topicPrefix: ctx.prefix, ...options });
  cleanups.push(() => sql.end({ timeout: 5 }), () => relay.stop());
  return relay;
}

async function unbounded(): Promise<{ url: string; collector: Collector }> {
  const broker = await unboundedBroker(ctx.mqttUrl);
  cleanups.push(() => broker.stop());
  const collector = await collect(broker.url, ctx.prefix);
  cleanups.push(() => collector.close());
  return { url: broker.url, collector };
}

const total = (chains: readonly Chain[]): number => chains.reduce((n, c) => n + c.events.length, 0);

/** Every event arrived, and each aggregate's first receipts are 1, 2, 3, … */
async function expectAllInOrder(collector: Collector, chains: readonly Chain[]): Promise<void> {
  await waitUntil(() => collector.firstArrivals().size >= total(chains), 30_000, `all ${total(chains)} events at the subscriber`);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "every row marked");
  const order = firstReceiptOrder(collector.messages);
  expect(order.violations).toEqual([]);
  expect(order.aggregates).toBe(chains.length);
  expect(order.events).toBe(total(chains));
}

test("one relay, adaptive claims over three connections, later events with OLDER created_at: each aggregate in sequence", async () => {
  const { url, collector } = await unbounded();
  const chains = await insertChains(db.sql, 400, 5, { createdAt: "reversed" });
  const relay = startRelay(await connectedBroker(url, 3));
  void relay.run();
  await expectAllInOrder(collector, chains);
});

test("two relays on one database, one claiming 3 rows at a time: each aggregate in sequence", async () => {
  const { url, collector } = await unbounded();
  const chains = await insertChains(db.sql, 300, 6);
  const small = startRelay(await connectedBroker(url), { batchSize: 3 });
  const large = startRelay(await connectedBroker(url, 3), { batchSize: 200 });
  void small.run();
  void large.run();
  await expectAllInOrder(collector, chains);
});

test("a publish that fails backs off and holds back only its own aggregate's later events", async () => {
  const { url, collector } = await unbounded();
  const chains = await insertChains(db.sql, 50, 3);
  const stuck = chains[7]!;
  const failing = stuck.events[1]!; // its first refund
  const broker = await connectedBroker(url);
  let fail = true;
  let failures = 0;
  const publish: PublishFn = async (message) => {
    if (fail && JSON.parse(message.payload).id === failing) {
      failures += 1;
      throw new Error("refused by the test");
    }
    return broker.publish(message);
  };
  const relay = startRelay(broker, { publish, retry: { baseSeconds: 0.05, maxSeconds: 0.2, maxAttempts: 1000 } });
  void relay.run();
  // Every other aggregate flows past it, while it fails again and again.
  const attemptsOf = async (id: string): Promise<number> => (await db.sql<{ n: number }[]>`select attempts as n from outbox where id = ${id}`)[0]?.n ?? 0;
  // Attempts as committed by the relay's batches (the publish function's count runs ahead of them).
  await waitUntil(async () => (await countWhere(db.sql, "published")) === total(chains) - 3 && (await attemptsOf(failing)) >= 3, 20_000, "the others published, the row failing");
  const held = await db.sql<{ sequence: number; attempts: number; published: boolean }[]>`
    select sequence, attempts, published_at is not null as published from outbox where aggregate_id = ${stuck.aggregateId} order by sequence`;
  expect(held.map((r) => r.published)).toEqual([true, false, false, false]);
  expect(held[1]!.attempts).toBeGreaterThanOrEqual(3);
  expect(failures).toBeGreaterThanOrEqual(held[1]!.attempts);
  // Never attempted while the row before them was failing.
  expect(held.slice(2).map((r) => r.attempts)).toEqual([0, 0]);
  fail = false;
  await expectAllInOrder(collector, chains);
});

test("a parked row holds back its aggregate; the gauge counts what waits; requeue releases it in order", async () => {
  const { url, collector } = await unbounded();
  const chains = await insertChains(db.sql, 40, 4);
  const stuck = chains[3]!;
  // Parked as the relay parks a row it can never publish.
  await db.sql`update outbox set parked_at = now(), attempts = 10, last_error = 'parked by the test' where id = ${stuck.events[1]!}`;
  const relay = startRelay(await connectedBroker(url));
  void relay.run();
  await waitUntil(async () => (await countWhere(db.sql, "published")) === total(chains) - 4, 20_000, "every other row published");
  expect(await pendingStats(db.sql)).toMatchObject({ parked: 1, held: 3, pending: 3 });
  const before = collector.firstArrivals().size;
  expect(await requeue(db.sql, stuck.events[1]!)).toBe(1);
  relay.wake();
  await expectAllInOrder(collector, chains);
  // The requeued row and the three behind it came last, in sequence.
  const last = [...collector.firstArrivals().values()].slice(before).map((m) => m.envelope?.id);
  expect(last).toEqual(stuck.events.slice(1));
  expect(await pendingStats(db.sql)).toMatchObject({ parked: 0, held: 0, pending: 0 });
});

test("bun relay.ts SIGKILLed mid-drain and started again: each aggregate's first receipts in sequence", async () => {
  const { url, collector } = await unbounded();
  const chains = await insertChains(db.sql, 2000, 4, { createdAt: "reversed" });
  const env = { DATABASE_URL: db.url, MQTT_URL: url, MQTT_TOPIC_PREFIX: ctx.prefix, LOG_LEVEL: "warn", OUTBOX_BATCH_SIZE: "100" };
  const first = await startEntrypoint("relay", { env });
  cleanups.push(() => first.child.stop());
  await waitUntil(async () => (await countWhere(db.sql, "published")) >= 1000, 20_000, "the drain under way");
  first.child.kill("SIGKILL");
  await first.child.done;
  expect(await countWhere(db.sql, "pending")).toBeGreaterThan(0);
  const second = await startEntrypoint("relay", { env });
  cleanups.push(() => second.child.stop());
  await expectAllInOrder(collector, chains);
});

test.skipIf(!mosquittoInstalled())("the broker restarted mid-drain (its sessions kept): each aggregate's first receipts in sequence", async () => {
  const broker = await privateMosquitto("max_queued_messages 0");
  cleanups.push(() => broker.stop());
  const collector = await collect(broker.url, ctx.prefix, { clientId: `order-${crypto.randomUUID().slice(0, 8)}`, persistent: true });
  cleanups.push(() => collector.close());
  const chains = await insertChains(db.sql, 1500, 4, { createdAt: "reversed" });
  const relay = startRelay(await connectedBroker(broker.url, 3));
  void relay.run();
  await waitUntil(async () => (await countWhere(db.sql, "published")) >= 500, 20_000, "the drain under way");
  await broker.stop();
  expect(await countWhere(db.sql, "pending")).toBeGreaterThan(0);
  await broker.start();
  await expectAllInOrder(collector, chains);
});

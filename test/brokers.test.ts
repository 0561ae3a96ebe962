// MQTT_URL as a list of brokers: the relay (bun relay.ts) and the reference subscriber
// (examples/reference-subscriber.ts) connect to the first, a private Mosquitto, which is then SIGKILLed;
// each moves to the second, says so once, and goes on: every row published in order, none
// parked, every event processed in sequence order. Two Mosquittos share nothing (no bridge),
// so what the first had not yet handed on dies with it: each phase waits until the first
// broker's part is done, and the second phase's events must all come through the second.
import { expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { collect, rawClient, type Collector } from "../testkit/mqtt.ts";
import { mosquittoInstalled, privateMosquitto, type PrivateBroker } from "../testkit/mosquitto.ts";
import { countWhere, extendChains, insertChains, type Chain } from "../testkit/outbox.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { relayTestContext } from "../testkit/relay-context.ts";
import { spawnSubscriber, type SubscriberLine } from "../testkit/subscriber.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const ctx = await relayTestContext("brokers");
const { db, cleanups } = ctx;
const mosquitto = test.skipIf(!mosquittoInstalled());
if (!mosquittoInstalled()) console.warn("test/brokers.test.ts: the broker-list tests skipped: they need `mosquitto` on PATH (apt-get install mosquitto)");

// Credentials in every URL: Mosquitto (allow_anonymous, no password file) ignores them, and
// neither /readyz nor a log line may show the password.
const PASSWORD = "s3cret-broker-pw";
const withCredentials = (broker: PrivateBroker): string => `mqtt://relay:${PASSWORD}@127.0.0.1:${broker.port}`;
const masked = (broker: PrivateBroker): string => `mqtt://relay:***@127.0.0.1:${broker.port}`;

async function twoBrokers(): Promise<[PrivateBroker, PrivateBroker]> {
  // No queue limit: the collectors take thousands of events at full speed.
  const brokers = await Promise.all([privateMosquitto("max_queued_messages 0"), privateMosquitto("max_queued_messages 0")]);
  cleanups.push(...brokers.map((b) => () => b.kill()));
  return brokers;
}

async function collector(url: string): Promise<Collector> {
  const c = await collect(url, ctx.prefix);
  cleanups.push(() => c.close());
  return c;
}

/** Every event of `chains` first received by `c`, each aggregate's in sequence order. */
async function receivedInOrder(c: Collector, chains: readonly Chain[], from: number): Promise<void> {
  const expected = chains.flatMap((chain) => chain.events.slice(from));
  await waitUntil(() => expected.every((id) => c.firstArrivals().has(id)), 20_000, `${expected.length} events at the collector`);
  for (const chain of chains) {
    const seen = c.messages.filter((m) => m.envelope?.aggregateId === chain.aggregateId && m.envelope.sequence !== undefined);
    const first = [...new Map(seen.map((m) => [m.envelope!.id, m.envelope!.sequence!])).values()];
    expect(first).toEqual(Array.from({ length: chain.events.length - from }, (_, i) => from + i + 1));
  }
}

const readyz = async (port: number): Promise<Record<string, unknown>> => (await fetch(`http://127.0.0.1:${port}/readyz`)).json() as Promise<Record<string, unknown>>;

mosquitto("bun relay.ts, MQTT_URL=A,B, A SIGKILLed: it moves to B once, /readyz names B, every row published in order, none parked", async () => {
  const [a, b] = await twoBrokers();
  const [atA, atB] = await Promise.all([collector(a.url), collector(b.url)]);
  const lines: string[] = [];
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: `${withCredentials(a)},${withCredentials(b)}`, MQTT_TOPIC_PREFIX: ctx.prefix, OUTBOX_POLL_MS: "200", LOG_LEVEL: "info" },
    stdout: (line) => lines.push(line),
  });
  cleanups.push(() => relay.child.stop());
  expect(await readyz(relay.port)).toMatchObject({ status: "ready", broker: "connected", brokerUrl: masked(a) });

  const chains = await insertChains(db.sql, 100, 2);
  await receivedInOrder(atA, chains, 0);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "the first rows marked");

  await a.kill();
  // While A is gone: a backlog of the same charges' next events and of new charges.
  const extended = await extendChains(db.sql, chains, 3);
  const fresh = await insertChains(db.sql, 100, 3);
  await receivedInOrder(atB, extended, 3);
  await receivedInOrder(atB, fresh, 0);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "every row marked");
  expect(await countWhere(db.sql, "parked")).toBe(0);
  expect(await readyz(relay.port)).toMatchObject({ status: "ready", broker: "connected", brokerUrl: masked(b) });

  // Three connections lost A; the move is told once, with both brokers masked.
  const moves = lines.filter((l) => l.includes("broker lost; moving to the next"));
  expect(moves).toHaveLength(1);
  expect(JSON.parse(moves[0]!)).toMatchObject({ level: "warn", from: masked(a), to: masked(b) });
  expect(lines.join("\n")).not.toContain(PASSWORD);
});

mosquitto("the subscriber, MQTT_URL=A,B, A SIGKILLed: it moves to B once and processes every event there in sequence order", async () => {
  const [a, b] = await twoBrokers();
  const urls = [withCredentials(a), withCredentials(b)];
  const { child, lines } = await spawnSubscriber({ databaseUrl: db.url, mqttUrl: urls.join(","), prefix: ctx.prefix, consumer: `brokers-${crypto.randomUUID().slice(0, 8)}` });
  cleanups.push(() => child.stop());
  expect(lines.find((l) => l.event === "ready")).toMatchObject({ broker: masked(a) });
  // The relay in this process, on the same list.
  const sql = createSql(db.url, { max: laneCount(100) + 1, applicationName: "brokers-test" });
  const broker = connectBroker(urls, { connections: 2 });
  const relay = createRelay({ sql, broker, batchSize: 100, pollMs: 100, topicPrefix: ctx.prefix });
  cleanups.push(() => sql.end({ timeout: 5 }), () => broker.close(), () => relay.stop());
  void relay.run();

  const chains = await insertChains(db.sql, 50, 1);
  await processedAll(lines, chains);
  await a.kill();
  await waitUntil(() => lines.some((l) => l.event === "broker-moved"), 10_000, "the subscriber to move");
  await subscribedAt(b, lines);
  await waitUntil(() => broker.connected && broker.url === masked(b), 10_000, "the relay on B");

  const extended = await extendChains(db.sql, chains, 3);
  await processedAll(lines, extended);
  expect(lines.filter((l) => l.event === "broker-moved")).toEqual([{ event: "broker-moved", from: masked(a), to: masked(b) } as SubscriberLine]);
  // In sequence order as they came: none had to wait for a predecessor, none skipped one.
  expect(lines.filter((l) => l.event === "held" || l.gapSkipped)).toEqual([]);
  expect(await countWhere(db.sql, "parked")).toBe(0);
});

/** Each chain's events processed once, in sequence order (first processing of each). */
async function processedAll(lines: readonly SubscriberLine[], chains: readonly Chain[]): Promise<void> {
  const all = chains.flatMap((c) => c.events);
  const processed = (): Map<string, SubscriberLine> => new Map(lines.filter((l) => l.event === "received" && !l.duplicate).map((l) => [l.id!, l]));
  await waitUntil(() => all.every((id) => processed().has(id)), 20_000, `${all.length} events processed`);
  const order = new Map<string, number[]>();
  for (const line of lines) if (line.event === "received" && !line.duplicate) order.set(line.aggregateId!, [...(order.get(line.aggregateId!) ?? []), line.sequence!]);
  for (const chain of chains) expect(order.get(chain.aggregateId)).toEqual(chain.events.map((_, i) => i + 1));
}

/**
 * The subscription is live at `broker`: a message that is not an event, published there until
 * the subscriber says it rejected one. Events published after that reach it.
 */
async function subscribedAt(broker: PrivateBroker, lines: readonly SubscriberLine[]): Promise<void> {
  const probe = await rawClient(broker.url);
  try {
    await waitUntil(async () => {
      await probe.publishAsync(topicOf(ctx.prefix, CHARGE_CREATED), "not an event", { qos: 1 });
      return lines.some((l) => l.event === "rejected");
    }, 10_000, "the subscription at the second broker", 200);
  } finally {
    await probe.endAsync();
  }
}

// MQTT_PROTOCOL_VERSION against a broker that closes the connection on an MQTT 5 CONNECT
// without a CONNACK and speaks 3.1.1 (testkit/mqtt-v311-only.ts, in front of the real broker):
// `auto` falls back, publishes every row and keeps 3.1.1 for its reconnects; `5` never falls
// back, and /readyz and ONE log line (not one per retry) name the cause. The reference
// subscriber takes the same path.
import { expect, setDefaultTimeout, test } from "bun:test";
import { startSubscriber } from "../lib/subscriber/subscriber.ts";
import { subscriptionFilter } from "../lib/charges/events.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { collect } from "../testkit/mqtt.ts";
import { v311OnlyBroker } from "../testkit/mqtt-v311-only.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { relayTestContext } from "../testkit/relay-context.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const ctx = await relayTestContext("mqtt_protocol");
const { db, mqttUrl, cleanups } = ctx;

const ROWS = 200;

/** A spawned relay on `brokerUrl`, its stdout lines kept. */
async function relayOn(brokerUrl: string, env: Record<string, string> = {}): Promise<{ base: string; lines: string[] }> {
  const lines: string[] = [];
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: brokerUrl, MQTT_TOPIC_PREFIX: ctx.prefix, OUTBOX_POLL_MS: "200", ...env },
    stdout: (line) => lines.push(line),
    readyPath: "/healthz",
  });
  cleanups.push(() => relay.child.stop());
  return { base: relay.base, lines };
}

const failures = (lines: readonly string[]) => lines.filter((line) => line.includes('"broker connection failed"'));

test("auto: the dropped MQTT 5 CONNECT falls back to 3.1.1, every row is published, reconnects stay on 3.1.1, one log line", async () => {
  const standIn = await v311OnlyBroker(mqttUrl);
  cleanups.push(() => standIn.close());
  const collector = await collect(mqttUrl, ctx.prefix);
  cleanups.push(() => collector.close());
  await insertPending(db.sql, ROWS);
  const { base, lines } = await relayOn(standIn.url);

  await collector.waitFor(ROWS, 30_000);
  await waitUntil(async () => (await countWhere(db.sql, "published")) === ROWS, 10_000, "every row marked published");
  expect((await fetch(`${base}/readyz`)).status).toBe(200);
  // Each of the relay's three connections tried 5 once, then 3.1.1.
  expect(standIn.attempts.filter((v) => v === 5).length).toBe(3);
  expect(failures(lines)).toHaveLength(1);
  expect(failures(lines)[0]).toContain("no CONNACK for the MQTT 5 CONNECT");

});

test("auto: after the fallback, a lost connection comes back on 3.1.1 without trying 5 again", async () => {
  const standIn = await v311OnlyBroker(mqttUrl);
  cleanups.push(() => standIn.close());
  const { base } = await relayOn(standIn.url, { RELAY_MQTT_CONNECTIONS: "1" });
  await waitUntil(async () => (await fetch(`${base}/readyz`)).status === 200, 20_000, "the relay connected");
  expect(standIn.attempts).toEqual([5, 4]);
  standIn.cutAll();
  await waitUntil(() => standIn.attempts.length >= 3, 20_000, "a reconnect");
  await waitUntil(async () => (await fetch(`${base}/readyz`)).status === 200, 20_000, "the relay connected again");
  expect(standIn.attempts.slice(2).every((v) => v === 4)).toBe(true);
});

test("MQTT_PROTOCOL_VERSION=5: never falls back; /readyz names the cause; one log line for many retries", async () => {
  const standIn = await v311OnlyBroker(mqttUrl);
  cleanups.push(() => standIn.close());
  await insertPending(db.sql, 3);
  const { base, lines } = await relayOn(standIn.url, { MQTT_PROTOCOL_VERSION: "5", RELAY_MQTT_CONNECTIONS: "1" });
  await waitUntil(() => standIn.attempts.length >= 3, 20_000, "three connection attempts");
  expect(standIn.attempts.every((v) => v === 5)).toBe(true);
  const ready = await fetch(`${base}/readyz`);
  expect(ready.status).toBe(503);
  const body = (await ready.json()) as { broker: string; brokerError?: string };
  expect(body.broker).toBe("disconnected");
  expect(body.brokerError).toContain("no CONNACK for the MQTT 5 CONNECT");
  expect(failures(lines)).toHaveLength(1);
  expect(await countWhere(db.sql, "published")).toBe(0);
  expect(await countWhere(db.sql, "attempted")).toBe(0);
});

test("the reference subscriber on auto falls back the same way and receives the events", async () => {
  const standIn = await v311OnlyBroker(mqttUrl);
  cleanups.push(() => standIn.close());
  const errors: string[] = [];
  const received: string[] = [];
  const subscriber = startSubscriber({
    sql: db.sql,
    mqttUrl: standIn.url,
    topic: subscriptionFilter(ctx.prefix),
    consumer: `protocol-${crypto.randomUUID().slice(0, 8)}`,
    onDelivery: ({ event }) => received.push(event.id),
    onError: (description) => errors.push(description),
  });
  cleanups.push(() => subscriber.close());
  await subscriber.ready;
  const rows = await insertPending(db.sql, 5);
  await relayOn(mqttUrl);
  await waitUntil(() => received.length === rows.length, 20_000, "the subscriber to receive every event");
  expect(new Set(received)).toEqual(new Set(rows.map((r) => r.id)));
  expect(standIn.attempts[0]).toBe(5);
  expect(standIn.attempts.slice(1).every((v) => v === 4)).toBe(true);
  expect(errors.filter((e) => e.includes("no CONNACK"))).toHaveLength(1);
});

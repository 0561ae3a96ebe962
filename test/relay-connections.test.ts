// The real `bun relay.ts` publishes over several MQTT connections (RELAY_MQTT_CONNECTIONS, 3
// by default), read on the wire by a proxy in front of the broker: the rows are spread over
// every connection, the events of one aggregate all take the same one in sequence order,
// and a connection cut mid-drain loses nothing.
import { afterAll, afterEach, expect, setDefaultTimeout, test } from "bun:test";
import type { IPublishPacket } from "mqtt-packet";
import { CHARGE_CREATED } from "../lib/charges/events.ts";
import { collect } from "../testkit/mqtt.ts";
import { unboundedBroker } from "../testkit/mosquitto.ts";
import { mqttProxy, type MqttProxy, type ProxiedConnection } from "../testkit/mqtt-proxy.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("relay_connections");
const { mqttUrl } = await services();
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

const AGGREGATES = 50;
const EVENTS_PER_AGGREGATE = 4;

/** AGGREGATES charges with EVENTS_PER_AGGREGATE outbox rows each (sequence 1, 2, …), interleaved in created_at, `seq` in their data. */
async function insertInterleaved(): Promise<number> {
  const total = AGGREGATES * EVENTS_PER_AGGREGATE;
  await db.sql`
    with c as (
      insert into charges (id, amount_cents) select gen_random_uuid(), 100 + i from generate_series(1, ${AGGREGATES}) as i
      returning id
    ), numbered as (select id, row_number() over () - 1 as n from c)
    insert into outbox (id, aggregate_id, sequence, event_type, payload, created_at)
    select gen_random_uuid(), c.id, e + 1, ${CHARGE_CREATED}, json_build_object('chargeId', c.id, 'seq', e)::text,
           now() - make_interval(secs => (${total} - (e * ${AGGREGATES} + c.n)) / 1000.0)
    from numbered as c, generate_series(0, ${EVENTS_PER_AGGREGATE - 1}) as e`;
  return total;
}

interface Sent {
  readonly id: string;
  readonly aggregateId: string;
  readonly seq: number;
}

const sentOf = (packet: IPublishPacket): Sent => {
  const body = JSON.parse(packet.payload.toString()) as { id: string; aggregateId: string; data: { seq: number } };
  return { id: body.id, aggregateId: body.aggregateId, seq: body.data.seq };
};

async function relayThrough(proxy: MqttProxy, prefix: string): Promise<void> {
  const env = { DATABASE_URL: db.url, MQTT_URL: proxy.url, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" };
  const relay = await startEntrypoint("relay", { env });
  cleanups.push(() => relay.child.stop());
}

async function proxied(brokerUrl: string): Promise<MqttProxy> {
  const proxy = await mqttProxy(brokerUrl);
  cleanups.push(() => proxy.close());
  return proxy;
}

test("three connections by default: rows spread over all of them, each aggregate on one, in sequence order", async () => {
  await db.sql`truncate outbox, inbox, refunds, charges`;
  const prefix = `test/${crypto.randomUUID()}/`;
  const proxy = await proxied(mqttUrl);
  const total = await insertInterleaved();
  await relayThrough(proxy, prefix);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 30_000, "every row published");

  // Against the embedded broker (MQTT 3.1.1 only) each client's MQTT 5 CONNECT is refused
  // first: those connections carry nothing.
  const connections = proxy.connections.filter((c) => c.publishes.length > 0);
  const base = proxy.connections.find((c) => !/-\d$/.test(c.clientId ?? ""))?.clientId;
  expect(connections.map((c) => c.clientId).sort()).toEqual([base, `${base}-2`, `${base}-3`]);

  const byConnection = connections.map((c) => c.publishes.map(sentOf));
  const ids = byConnection.flat().map((s) => s.id);
  expect(ids).toHaveLength(total);
  expect(new Set(ids).size).toBe(total);
  const seen = new Map<string, { connection: number; seqs: number[] }>();
  byConnection.forEach((sent, connection) => {
    for (const { aggregateId, seq } of sent) {
      const entry = seen.get(aggregateId) ?? { connection, seqs: [] };
      expect(entry.connection).toBe(connection);
      entry.seqs.push(seq);
      seen.set(aggregateId, entry);
    }
  });
  expect(seen.size).toBe(AGGREGATES);
  for (const { seqs } of seen.values()) expect(seqs).toEqual([0, 1, 2, 3]);
});

test("one connection cut mid-drain: it reconnects, and every row reaches the subscriber and is marked", async () => {
  await db.sql`truncate outbox, inbox, refunds, charges`;
  const prefix = `test/${crypto.randomUUID()}/`;
  const broker = await unboundedBroker(mqttUrl);
  cleanups.push(() => broker.stop());
  const collector = await collect(broker.url, prefix);
  cleanups.push(() => collector.close());
  const proxy = await proxied(broker.url);
  const CUT_AFTER = 300;
  let cut: ProxiedConnection | undefined;
  let openedBeforeCut = 0;
  proxy.onPublish = (connection) => {
    if (cut || !connection.clientId?.endsWith("-2") || connection.publishes.length < CUT_AFTER) return;
    cut = connection;
    openedBeforeCut = proxy.connections.length;
    connection.cut();
  };
  const rows = await insertPending(db.sql, 3000);
  await relayThrough(proxy, prefix);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 30_000, "every row published");
  await collector.barrier();

  expect(cut?.publishes).toHaveLength(CUT_AFTER);
  // The cut connection's client came back under its own id; the other two stayed up.
  const after = proxy.connections.slice(openedBeforeCut);
  expect(after.length).toBeGreaterThan(0);
  expect(after.map((c) => c.clientId)).toEqual(after.map(() => cut?.clientId));
  const received = new Set(collector.ids());
  expect(rows.filter((r) => !received.has(r.id))).toEqual([]);
});

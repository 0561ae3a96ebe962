// Drain benchmark: N pending outbox rows inserted directly, then the time for the relay to
// publish and mark them all, next to what a bare mqtt.js client gets from the same broker in
// the same run (QoS 1 PUBACKs/s), and to a naive relay (claim 500, publish all, one UPDATE).
//   bun bench/relay-drain.ts [rows=50000] [OUTBOX_BATCH_SIZE caps...=2000]
// Uses the services testkit/services.ts decides on (DATABASE_URL and MQTT_URL, or Docker).
import mqtt from "mqtt";
import { CHARGE_CREATED, EVENT_CONTENT_TYPE, topicOf, userPropertiesOf } from "../lib/charges/events.ts";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { DEFAULT_OUTBOX_BATCH_SIZE } from "../lib/platform/config.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { insertPending } from "../testkit/outbox.ts";
import { sampleEnvelope } from "./mqtt-bench.ts";
import { benchServices, freshDatabase, untilDrained } from "./support.ts";

// Bounds a stuck drain; a healthy one of the default backlog takes seconds.
const DRAIN_TIMEOUT_MS = 600_000;

const { mqttUrl } = await benchServices();
const rows = Number(process.argv[2] ?? 50_000);
const batchSizes = process.argv.slice(3).map(Number);
// The default cap (OUTBOX_BATCH_SIZE) when none is given.
if (batchSizes.length === 0) batchSizes.push(DEFAULT_OUTBOX_BATCH_SIZE);

const envelope = sampleEnvelope();
const properties = { contentType: EVENT_CONTENT_TYPE, userProperties: userPropertiesOf({ id: crypto.randomUUID(), type: CHARGE_CREATED, tenantId: "bench-tenant", sequence: 1, traceparent: null }) };

async function bareClientRate(window: number): Promise<number> {
  const client = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 });
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: window }, async () => {
      while (next < rows) {
        next += 1;
        await client.publishAsync(topicOf("bench/bare/", CHARGE_CREATED), envelope, { qos: 1, properties });
      }
    }),
  );
  const rate = rows / ((performance.now() - started) / 1000);
  await client.endAsync();
  return rate;
}

async function withBacklog<T>(run: (sql: Sql, name: string, url: string) => Promise<T>): Promise<T> {
  const db = await freshDatabase("drain", 10);
  try {
    await insertPending(db.sql, rows);
    if (process.env.ANALYZE) await db.sql`vacuum analyze outbox`;
    return await run(db.sql, db.name, db.url);
  } finally {
    await db.drop();
  }
}

function relayRate(batchSize: number): Promise<number> {
  return withBacklog(async (_sql, name, url) => {
    const sql = createSql(url, { max: laneCount(batchSize) + 1 });
    const broker = connectBroker(mqttUrl);
    await new Promise<void>((resolve) => broker.onConnectionChange((up) => up && resolve()));
    const relay = createRelay({ sql, broker, batchSize, pollMs: 1000, topicPrefix: `bench/${name}/` });
    const started = performance.now();
    void relay.run();
    await untilDrained(_sql, DRAIN_TIMEOUT_MS);
    const rate = rows / ((performance.now() - started) / 1000);
    await relay.stop();
    await broker.close();
    await sql.end();
    return rate;
  });
}

/** The naive relay the drain is compared with: one batch of 500 at a time, publish all, one UPDATE. */
function naiveRate(): Promise<number> {
  return withBacklog(async (sql, name) => {
    const client = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 });
    const started = performance.now();
    for (;;) {
      const done = await sql.begin(async (tx) => {
        const batch = await tx<{ id: string; payload: string }[]>`
          select id, payload from outbox where published_at is null
          order by created_at limit 500 for update skip locked`;
        await Promise.all(batch.map((r) => client.publishAsync(topicOf(`bench/${name}/`, CHARGE_CREATED), r.payload, { qos: 1 })));
        await tx`update outbox set published_at = now() where id = any(${batch.map((r) => r.id)}::uuid[])`;
        return batch.length === 0;
      });
      if (done) break;
    }
    const rate = rows / ((performance.now() - started) / 1000);
    await client.endAsync();
    return rate;
  });
}

const bare = await bareClientRate(1000);
const bareAtReceiveMaximum = await bareClientRate(20);
console.log(`rows: ${rows}`);
console.log(`bare mqtt.js client, QoS 1, 1000 in flight: ${Math.round(bare)} PUBACKs/s`);
console.log(`bare mqtt.js client, QoS 1,   20 in flight: ${Math.round(bareAtReceiveMaximum)} PUBACKs/s (Mosquitto's Receive Maximum)`);
const naive = await naiveRate();
console.log(`naive relay (claim 500, publish all, one UPDATE): ${Math.round(naive)} rows/s = ${(naive / bare).toFixed(2)}x bare`);
for (const batchSize of batchSizes) {
  const rate = await relayRate(batchSize);
  console.log(
    `relay, OUTBOX_BATCH_SIZE=${batchSize} (${laneCount(batchSize)} lanes): ${Math.round(rate)} rows/s = ${(rate / bare).toFixed(2)}x bare`,
  );
}

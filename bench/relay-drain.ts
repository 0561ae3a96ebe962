// Drain benchmark: N pending outbox rows inserted directly, then the time for the relay to
// publish and mark them all, next to what a bare mqtt.js client gets from the same broker in
// the same run (QoS 1 PUBACKs/s), and to a naive relay (claim 500, publish all, one UPDATE).
//   bun bench/relay-drain.ts [rows=50000] [batch sizes...=50]
// Uses DATABASE_URL (a database it may CREATE DATABASE from) and MQTT_URL.
import mqtt from "mqtt";
import { createSql, type Sql } from "../lib/shared/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { createScratchDatabase, scratchName, withDatabase } from "../testkit/database.ts";

const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const mqttUrl = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
const rows = Number(process.argv[2] ?? 50_000);
const batchSizes = process.argv.slice(3).map(Number);
if (batchSizes.length === 0) batchSizes.push(50);

const envelope = JSON.stringify({
  id: crypto.randomUUID(),
  type: "ChargeCreated",
  aggregateId: crypto.randomUUID(),
  createdAt: new Date().toISOString(),
  data: { chargeId: crypto.randomUUID(), amountCents: 4900 },
});
const properties = { contentType: "application/json", userProperties: { "event-id": "x", "event-type": "ChargeCreated" } };

async function bareClientRate(window: number): Promise<number> {
  const client = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 });
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: window }, async () => {
      while (next < rows) {
        next += 1;
        await client.publishAsync("bench/bare/charges/ChargeCreated", envelope, { qos: 1, properties });
      }
    }),
  );
  const rate = rows / ((performance.now() - started) / 1000);
  await client.endAsync();
  return rate;
}

async function withBacklog<T>(run: (sql: Sql, name: string) => Promise<T>): Promise<T> {
  const db = await createScratchDatabase(adminUrl, scratchName("bench", "drain"), { max: 10 });
  const { name, sql } = db;
  try {
    await sql`insert into charges (id, amount_cents, created_at)
              select gen_random_uuid(), 4900, clock_timestamp() from generate_series(1, ${rows})`;
    await sql`insert into outbox (id, aggregate_id, event_type, payload, created_at)
              select gen_random_uuid(), id, 'ChargeCreated',
                     json_build_object('chargeId', id, 'amountCents', amount_cents)::text, created_at
              from charges`;
    if (process.env.ANALYZE) await sql`vacuum analyze outbox`;
    return await run(sql, name);
  } finally {
    await db.drop();
  }
}

async function untilDrained(sql: Sql): Promise<void> {
  for (;;) {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null`;
    if (row?.n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function relayRate(batchSize: number): Promise<number> {
  return withBacklog(async (_sql, name) => {
    const sql = createSql(withDatabase(adminUrl, name), { max: laneCount(batchSize) + 1 });
    const broker = connectBroker(mqttUrl);
    await new Promise<void>((resolve) => broker.onConnectionChange((up) => up && resolve()));
    const relay = createRelay({ sql, broker, batchSize, pollMs: 1000, topicPrefix: `bench/${name}/` });
    const started = performance.now();
    void relay.run();
    await untilDrained(_sql);
    const rate = rows / ((performance.now() - started) / 1000);
    await relay.stop();
    await broker.close();
    await sql.end();
    return rate;
  });
}

/** The reference: one batch of 500 at a time, publish all, one UPDATE. */
function naiveRate(): Promise<number> {
  return withBacklog(async (sql, name) => {
    const client = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 });
    const started = performance.now();
    for (;;) {
      const done = await sql.begin(async (tx) => {
        const batch = await tx<{ id: string; payload: string }[]>`
          select id, payload from outbox where published_at is null
          order by created_at limit 500 for update skip locked`;
        await Promise.all(batch.map((r) => client.publishAsync(`bench/${name}/charges/ChargeCreated`, r.payload, { qos: 1 })));
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

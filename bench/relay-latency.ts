// Commit → subscriber latency at a light steady load, with the real `bun relay.ts` running:
// this process commits a charge + outbox row every 1000/rate ms (open loop, as the API does:
// one transaction, then notifier.poke()), and a plain MQTT subscriber in this process
// records when each event arrives.
//   bun bench/relay-latency.ts [rate=200] [seconds=10]
import mqtt from "mqtt";
import { freePort } from "../dev/ports.ts";
import { createOutboxNotifier } from "../lib/shared/wakeup.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";

const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const mqttUrl = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
const rate = Number(process.argv[2] ?? 200);
const seconds = Number(process.argv[3] ?? 10);

const db = await createScratchDatabase(adminUrl, scratchName("bench", "latency"), { max: 8 });
const { name, url, sql } = db;
const prefix = `bench/${name}/`;

const committedAt = new Map<string, number>();
const latencies: number[] = [];
const subscriber = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 });
subscriber.on("message", (_topic, payload) => {
  const id = (JSON.parse(payload.toString()) as { id: string }).id;
  const committed = committedAt.get(id);
  if (committed !== undefined) latencies.push(performance.now() - committed);
});
await subscriber.subscribeAsync(`${prefix}charges/#`, { qos: 1 });

const port = await freePort();
const relay = Bun.spawn(["bun", "relay.ts"], {
  cwd: new URL("..", import.meta.url).pathname,
  env: { ...process.env, DATABASE_URL: url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, RELAY_PORT: String(port), LOG_LEVEL: "warn" },
});
for (;;) {
  const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false);
  if (ready) break;
  await Bun.sleep(50);
}
await Bun.sleep(200); // LISTEN in place

const notifier = createOutboxNotifier(sql);
async function charge(): Promise<void> {
  const chargeId = crypto.randomUUID();
  const id = crypto.randomUUID();
  await sql.begin(async (tx) => {
    await tx`insert into charges (id, amount_cents) values (${chargeId}, 4900)`;
    await tx`insert into outbox (id, aggregate_id, event_type, payload)
             values (${id}, ${chargeId}, 'ChargeCreated', ${JSON.stringify({ chargeId, amountCents: 4900 })})`;
  });
  committedAt.set(id, performance.now());
  notifier.poke();
}

const total = rate * seconds;
const started = performance.now();
const inflight: Promise<void>[] = [];
for (let i = 0; i < total; i++) {
  const due = started + (i * 1000) / rate;
  const wait = due - performance.now();
  if (wait > 0) await Bun.sleep(wait);
  inflight.push(charge());
}
await Promise.all(inflight);
const deadline = performance.now() + 5000;
while (latencies.length < total && performance.now() < deadline) await Bun.sleep(20);

latencies.sort((a, b) => a - b);
const at = (q: number): string => (latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN).toFixed(1);
console.log(`${rate}/s for ${seconds} s: ${latencies.length}/${total} received; commit → subscriber p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`);

const [marked] = await sql<{ p50: number; p99: number }[]>`
  select percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.99) within group (order by ms) as p99
  from (select extract(epoch from published_at - created_at) * 1000 as ms from outbox) as lags`;
console.log(`row created → published_at (relay side, includes the insert transaction): p50 ${marked?.p50.toFixed(1)} ms, p99 ${marked?.p99.toFixed(1)} ms`);

relay.kill("SIGTERM");
await relay.exited;
await notifier.close();
await subscriber.endAsync();
await db.drop();

// Commit → subscriber latency at a light steady load, with the real `bun relay.ts` running:
// this process commits a charge + outbox row every 1000/rate ms (open loop, as the API does:
// one transaction, then notifier.poke()), and a plain MQTT subscriber in this process
// records when each event arrives.
//   bun bench/relay-latency.ts [rate=200] [seconds=10]
import { createOutboxNotifier } from "../lib/platform/wakeup.ts";
import { collect } from "../testkit/mqtt.ts";
import { insertCharge } from "../testkit/outbox.ts";
import { waitUntil } from "../testkit/wait.ts";
import { benchServices, freshDatabase, startProcess } from "./support.ts";

// Events still on their way after the last commit arrive within this.
const DRAIN_TIMEOUT_MS = 5000;

const rate = Number(process.argv[2] ?? 200);
const seconds = Number(process.argv[3] ?? 10);

const { mqttUrl } = await benchServices();
const db = await freshDatabase("latency", 8);
const { name, sql } = db;
const prefix = `bench/${name}/`;

const committedAt = new Map<string, number>();
const subscriber = await collect(mqttUrl, prefix);
const relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" });
const notifier = createOutboxNotifier(sql);

/** Commits a charge and its outbox row (one transaction), then pokes the relay, as the API does. */
async function charge(): Promise<string> {
  const { id } = await insertCharge(sql);
  committedAt.set(id, performance.now());
  notifier.poke();
  return id;
}

// Warm-up: one event through the whole path, so the relay's LISTEN is in place before the clock starts.
const warmUp = await charge();
await subscriber.waitForMessage((m) => m.envelope?.id === warmUp, DRAIN_TIMEOUT_MS, "the warm-up event");
committedAt.clear();

const total = rate * seconds;
const started = performance.now();
const inflight: Promise<unknown>[] = [];
for (let i = 0; i < total; i++) {
  const due = started + (i * 1000) / rate;
  const wait = due - performance.now();
  if (wait > 0) await Bun.sleep(wait);
  inflight.push(charge());
}
await Promise.all(inflight);
/** Commit → first receipt of each event committed during the run. */
function latencies(): number[] {
  const measured: number[] = [];
  for (const [id, m] of subscriber.firstArrivals()) {
    const committed = committedAt.get(id);
    if (committed !== undefined) measured.push(m.at - committed);
  }
  return measured;
}
// Bounded: a shortfall shows in the "received" count.
await waitUntil(() => latencies().length >= total, DRAIN_TIMEOUT_MS, "every event").catch(() => {});
const measured = latencies();
measured.sort((a, b) => a - b);
const at = (q: number): string => (measured[Math.min(measured.length - 1, Math.floor(q * measured.length))] ?? NaN).toFixed(1);
console.log(`${rate}/s for ${seconds} s: ${measured.length}/${total} received; commit → subscriber p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`);

const [marked] = await sql<{ p50: number; p99: number }[]>`
  select percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.99) within group (order by ms) as p99
  from (select extract(epoch from published_at - created_at) * 1000 as ms from outbox) as lags`;
console.log(`row created → published_at (relay side, includes the insert transaction): p50 ${marked?.p50.toFixed(1)} ms, p99 ${marked?.p99.toFixed(1)} ms`);

await relay.child.stop();
await notifier.close();
await subscriber.close();
await db.drop();

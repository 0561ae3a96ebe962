// `bun bench/subscriber-ab.ts [rounds=5] [events=3000] [baseline=d0b085e]`: events handled per
// second, and the subscriber process's CPU per event, by charges-outbox/subscriber
// (createSubscriber) against the reference subscriber of `baseline` (its startSubscriber, from a
// worktree of that commit), alternated round by round. Both run the same handler, one row
// inserted per event in the inbox's transaction, on a postgres.js pool of 2 of their own, in a
// process of their own; each round a fresh database and topic, and `events` ChargeCreated
// envelopes (one charge each, sequence 1) published at QoS 1 to a broker that queues without
// limit while the subscriber drains them. Timed from its first event handled to its last.
// Prints one line per run and the median of the per-pair ratios (this / baseline).
import { join } from "node:path";
import { buildEnvelope, CHARGE_CREATED, subscriptionFilter, topicOf } from "../lib/charges/events.ts";
import { unboundedBroker } from "../testkit/mosquitto.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { ROOT, spawnChild } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { checkoutOf } from "./relay-baseline.ts";
import type { Report } from "./report.ts";
import { benchServices, freshDatabase, log, median } from "./support.ts";

export const SUBSCRIBER_BASELINE = "d0b085e";
type Side = "library" | "reference";

interface Result {
  readonly side: Side;
  readonly perSec: number;
  readonly cpuUsPerEvent: number;
}

// Publishes in flight at once: far ahead of any subscriber, without flooding the harness.
const PUBLISH_WINDOW = 200;

if (process.argv[2] === "--child") await child(process.argv.slice(3));
else if (import.meta.main) await main();

async function main(): Promise<void> {
  const [rounds = 5, events = 3000] = process.argv.slice(2, 4).map(Number);
  const baseline = process.argv[4] ?? SUBSCRIBER_BASELINE;
  report(await subscriberRuns(rounds, events, baseline), baseline, events);
}

/** bench/run.ts's section: the library's events/s against the reference's, and both CPU per event. */
export async function subscriberSection(out: Report, rounds: number, events: number): Promise<void> {
  const results = await subscriberRuns(rounds, events, SUBSCRIBER_BASELINE);
  const s = summaryOf(results);
  out.raw.subscriberAb = results;
  out.row("subscriber library events/s (one row a handler)", s.rate("library"), "events/s", `>= 1.0x the reference of ${SUBSCRIBER_BASELINE}`, (r) => r >= 1.0, s.rate("reference"), median(s.ratios));
  out.row("subscriber library CPU per event", s.cpu("library"), "µs", "report", null, s.cpu("reference"), s.cpu("library") / s.cpu("reference"));
}

async function subscriberRuns(rounds: number, events: number, baseline: string): Promise<Result[]> {
  const { mqttUrl } = await benchServices();
  const broker = await unboundedBroker(mqttUrl);
  const checkout = await checkoutOf(baseline);
  const results: Result[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      // Which goes first alternates, so neither always runs on the warmer machine.
      const order: Side[] = round % 2 === 0 ? ["library", "reference"] : ["reference", "library"];
      for (const side of order) {
        const result = await runOnce(side, side === "library" ? ROOT : checkout.dir, broker.url, events);
        log(`round ${round + 1} ${side}: ${result.perSec.toFixed(0)} events/s, ${result.cpuUsPerEvent.toFixed(0)} µs CPU per event`);
        results.push(result);
      }
    }
  } finally {
    await checkout.remove();
    await broker.stop();
  }
  return results;
}

function summaryOf(results: readonly Result[]) {
  const of = (side: Side) => results.filter((r) => r.side === side);
  return {
    ratios: of("library").map((r, i) => r.perSec / of("reference")[i]!.perSec),
    cpu: (side: Side) => median(of(side).map((r) => r.cpuUsPerEvent)),
    rate: (side: Side) => median(of(side).map((r) => r.perSec)),
  };
}

function report(results: readonly Result[], baseline: string, events: number): void {
  const { ratios, cpu, rate } = summaryOf(results);
  console.log(`subscriber A/B, ${events} events a run, ${ratios.length} pairs: library ${rate("library").toFixed(0)} events/s, ${cpu("library").toFixed(0)} µs CPU/event; reference of ${baseline} ${rate("reference").toFixed(0)} events/s, ${cpu("reference").toFixed(0)} µs CPU/event`);
  console.log(`library / reference events per second: median ${median(ratios).toFixed(3)} (pairs ${ratios.map((r) => r.toFixed(3)).join(", ")})`);
}

async function runOnce(side: Side, dir: string, mqttUrl: string, events: number): Promise<Result> {
  const db = await freshDatabase(`sub_ab_${side}`);
  const prefix = `bench/${crypto.randomUUID()}/`;
  const lines: Record<string, unknown>[] = [];
  const proc = spawnChild(["bun", join(ROOT, "bench/subscriber-ab.ts"), "--child", side, dir, db.url, mqttUrl, prefix, String(events)], {
    name: `subscriber-ab ${side}`,
    stdout: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  try {
    await waitUntil(() => lines.some((l) => l.ready) || proc.exited, 30_000, `${side} subscribed`);
    await publish(mqttUrl, prefix, events);
    const done = await waitUntil(() => lines.find((l) => l.perSec !== undefined) ?? (proc.exited && { failed: proc.output() }), 300_000, `${side} handled ${events} events`);
    if ("failed" in done) throw new Error(`${side} exited: ${String(done.failed)}`);
    const [rows] = await db.sql<{ n: number }[]>`select count(*)::int as n from bench_rows`;
    if (rows?.n !== events) throw new Error(`${side}: ${rows?.n} rows for ${events} events`);
    return { side, perSec: Number(done.perSec), cpuUsPerEvent: Number(done.cpuUsPerEvent) };
  } finally {
    await proc.stop();
    await db.drop();
  }
}

async function publish(mqttUrl: string, prefix: string, events: number): Promise<void> {
  const client = await rawClient(mqttUrl);
  const createdAt = new Date().toISOString().replace("Z", "000Z");
  const one = (): Promise<unknown> => {
    const chargeId = crypto.randomUUID();
    const payload = buildEnvelope({ id: crypto.randomUUID(), type: CHARGE_CREATED, aggregateId: chargeId, tenantId: "bench", createdAt, sequence: 1, data: { chargeId, amountCents: 100, currency: "usd" } });
    return client.publishAsync(topicOf(prefix, CHARGE_CREATED), payload, { qos: 1 });
  };
  let sent = 0;
  await Promise.all(Array.from({ length: PUBLISH_WINDOW }, async () => {
    while (sent < events) {
      sent += 1;
      await one();
    }
  }));
  await client.endAsync();
}

// The measured process: one subscriber, the same handler on either side.
interface Tx {
  (strings: TemplateStringsArray, ...values: unknown[]): Promise<unknown>;
}
type Started = { ready: Promise<void> };

async function child([side, dir, dbUrl, mqttUrl, prefix, eventsText]: string[]): Promise<void> {
  const events = Number(eventsText);
  const { default: postgres } = await import("postgres");
  const sql = postgres(dbUrl!, { max: 2, onnotice: () => {} });
  await sql`create table bench_rows (event_id uuid primary key, amount_cents integer not null)`;
  let handled = 0;
  let first: { at: number; cpu: NodeJS.CpuUsage } | undefined;
  const handle = async (event: { id: string; data: unknown }, tx: Tx): Promise<void> => {
    await tx`insert into bench_rows (event_id, amount_cents) values (${event.id}, ${(event.data as { amountCents: number }).amountCents})`;
  };
  const delivered = (): void => {
    handled += 1;
    if (handled === 1) first = { at: performance.now(), cpu: process.cpuUsage() };
    if (handled !== events || !first) return;
    const cpu = process.cpuUsage(first.cpu);
    const seconds = (performance.now() - first.at) / 1000;
    console.log(JSON.stringify({ perSec: (events - 1) / seconds, cpuUsPerEvent: (cpu.user + cpu.system) / (events - 1) }));
  };
  const consumer = `bench-${side}`;
  let started: Started;
  if (side === "library") {
    const lib = (await import(join(dir!, "lib/subscriber/index.ts"))) as typeof import("../lib/subscriber/index.ts");
    await lib.migrateSubscriber(sql);
    started = lib.createSubscriber({ mqttUrl: mqttUrl!, sql, consumer, topicPrefix: prefix, inboxRetentionSeconds: false, handle: (e, tx) => handle(e, tx as unknown as Tx), onDelivery: delivered });
  } else {
    const ref = (await import(join(dir!, "lib/subscriber/subscriber.ts"))) as { startSubscriber: (o: Record<string, unknown>) => Started };
    started = ref.startSubscriber({ mqttUrl, sql, consumer, topic: subscriptionFilter(prefix!), handler: handle, onDelivery: delivered });
  }
  await started.ready;
  console.log(JSON.stringify({ ready: true }));
}


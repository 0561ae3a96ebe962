// Scenario 18: a subscriber on the packed library (charges-outbox/subscriber installed from the
// project's tarball into a scratch Node project, run by node), whose handler writes one row per
// event in a table of its own database, is SIGKILLed again and again in the middle of an event:
// inside the handler once its row is written but not committed, and after the commit before
// the PUBACK. Meanwhile charges, refunds and manual charges with their captures flow, the
// private broker restarts once, and messages that are no valid event (garbage, a wrong field,
// an event type from the future) are published straight to the topic. Proves: every committed
// event has exactly one row, each charge's rows in sequence order; the bad messages end as dead
// letters or a counted unknown event, and the stream goes on.
// CHAOS_18_CHECKOUT=<dir> packs that checkout instead (docs/chaos.md: with `handle` run outside
// the inbox transaction there, the rows double).
import { tokenFor } from "../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { mosquittoInstalled, privateMosquitto } from "../testkit/mosquitto.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { installPacked } from "../testkit/package.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { buildEnvelope, CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { chargeHeaders } from "./lib/client.ts";
import { chaosServices, startApi, startRelay } from "./lib/harness.ts";
import { startPacked, type KillPoint, type PackedRun, type PackedSubscriberEnv } from "./lib/packed-subscriber.ts";
import { scenario, settle, type Ctx } from "./lib/report.ts";
import { skipScenario } from "./lib/skip.ts";

if (!mosquittoInstalled()) skipScenario("18", "it needs `mosquitto` on PATH for a broker it restarts (apt-get install mosquitto)");

const WORKERS = 3;
// A pause between a worker's operations: a load the subscriber keeps up with on a shared machine,
// so that the kills land while it flows and the end is not a backlog.
const PAUSE_MS = 40;
// Kills, alternating between the two points, each after a few events of its incarnation.
const KILLS: readonly KillPoint[] = ["written", "committed", "written", "committed", "written", "committed"];
const KILL_AFTER_MIN = 3;
const KILL_AFTER_SPREAD = 8;
// The broker restarts after this many kills.
const BROKER_RESTART_AFTER = 3;
const SETTLE_MS = 60_000;
// The event of a type from the future published to the topic.
const FUTURE_ID = crypto.randomUUID();

await scenario("18", "a subscriber on the packed library SIGKILLed mid-handler, the broker restarted once, bad messages on the topic", async (ctx) => {
  const { checks } = ctx;
  const [installed, own] = await Promise.all([installPacked(process.env.CHAOS_18_CHECKOUT || undefined), subscriberDatabase()]);
  const broker = await privateMosquitto("max_queued_messages 0");
  try {
    const api = await startApi(ctx.db.url, ctx.prefix);
    await startRelay(ctx.db.url, ctx.prefix, broker.url);
    const env: PackedSubscriberEnv = { databaseUrl: own.url, mqttUrl: broker.url, prefix: ctx.prefix, consumer: ctx.consumer, apiUrl: api.base, apiToken: await tokenFor() };
    let stop = false;
    let load: Promise<void>[] = [];

    const kills: KillPoint[] = [];
    for (const [i, point] of KILLS.entries()) {
      const run = await startPacked(installed, env, point, KILL_AFTER_MIN + Math.floor(Math.random() * KILL_AFTER_SPREAD));
      // Once its session exists at the broker: from then on, what it misses waits there for it.
      if (i === 0) load = Array.from({ length: WORKERS }, (_, w) => flow(api.base, w, () => stop));
      kills.push(await run.killed);
      if (i + 1 === BROKER_RESTART_AFTER) {
        await publishBadMessages(broker.url, ctx.prefix);
        // SIGTERM: Mosquitto saves its sessions, with what is queued in them, and comes back with them.
        await broker.stop();
        await broker.start();
      }
    }
    stop = true;
    await Promise.all(load);
    const last: PackedRun = await startPacked(installed, env, "none", 0);

    const t = await settleOwn(ctx, own);
    await rowChecks(ctx, own);
    const killedAt = (p: KillPoint) => kills.filter((k) => k === p).length;
    checks.check(killedAt("written") >= 3 && killedAt("committed") >= 3,
      `the subscriber was SIGKILLed ${killedAt("written")} times between its write and the commit, ${killedAt("committed")} times after the commit before the PUBACK`);
    const malformed = await own.sql<{ error: string }[]>`select error from subscriber_dead_letters where consumer = ${ctx.consumer} and error like 'malformed:%'`;
    checks.check(malformed.length === 2, "the garbage and the wrong field were kept as dead letters with their reasons",
      `${malformed.length}: ${malformed.map((m) => m.error).join("; ")}`);
    const [future] = await own.sql<{ n: number }[]>`select count(*)::int as n from inbox where consumer = ${ctx.consumer} and event_id = ${FUTURE_ID}::uuid`;
    checks.check(future?.n === 1, "the event of a future type was acknowledged and counted as unknown (in the inbox, no row of the handler's)");
    checks.check(t.unpublished === 0, "every outbox row was published", `${t.unpublished} pending`);
    await last.child.stop();
    return t;
  } finally {
    await broker.stop();
    await installed.remove();
    await own.drop().catch(() => {});
  }
});

/** The subscriber's own database: empty, migrated by the library. */
async function subscriberDatabase(): Promise<ScratchDatabase> {
  const { adminDatabaseUrl } = await chaosServices();
  return createScratchDatabase(adminDatabaseUrl, scratchName("chaos", "18_own"), { migrate: false, applicationName: "chaos-harness" });
}

async function post(base: string, path: string, body: object): Promise<{ status: number; id?: string }> {
  for (let tries = 0; tries < 20; tries++) {
    const key = crypto.randomUUID();
    const r = await fetch(`${base}${path}`, { method: "POST", headers: await chargeHeaders(key), body: JSON.stringify(body) }).catch(() => undefined);
    if (r && ![409, 503].includes(r.status)) return { status: r.status, id: ((await r.json()) as { id?: string }).id };
    await sleep(50);
  }
  return { status: 0 };
}

/** Charges; every third one manual and captured; every other one refunded. */
async function flow(base: string, w: number, stopped: () => boolean): Promise<void> {
  for (let i = 0; !stopped(); i++) {
    const manual = (i + w) % 3 === 0;
    const charge = await post(base, "/charges", { amountCents: 1000 + i, ...(manual && { capture: "manual" }) });
    if (charge.status !== 201 || !charge.id) continue;
    if (manual) await post(base, `/charges/${charge.id}/capture`, { amountCents: 900 });
    if (i % 2 === 0) await post(base, `/charges/${charge.id}/refunds`, { amountCents: 100 });
    await sleep(PAUSE_MS);
  }
}


async function publishBadMessages(url: string, prefix: string): Promise<void> {
  const client = await rawClient(url);
  const chargeId = crypto.randomUUID();
  const createdAt = new Date().toISOString().replace("Z", "000Z");
  const wrong = JSON.parse(buildEnvelope({ id: crypto.randomUUID(), type: CHARGE_CREATED, aggregateId: chargeId, tenantId: "t", createdAt, sequence: 1, data: { chargeId, amountCents: 5 } })) as { data: Record<string, unknown> };
  wrong.data.amountCents = "five";
  const future = { id: FUTURE_ID, type: "ChargeDisputed", aggregateId: chargeId, tenantId: "t", createdAt, sequence: 1, data: { chargeId } };
  await client.publishAsync(topicOf(prefix, CHARGE_CREATED), "\u0000garbage{", { qos: 1 });
  await client.publishAsync(topicOf(prefix, CHARGE_CREATED), JSON.stringify(wrong), { qos: 1 });
  await client.publishAsync(topicOf(prefix, "ChargeDisputed"), JSON.stringify(future), { qos: 1 });
  await client.endAsync();
}

/** Waits (bounded) until every published event has its row in the subscriber's table. */
async function settleOwn(ctx: Ctx, own: ScratchDatabase): ReturnType<typeof settle> {
  await waitUntil(async () => {
    const ids = (await ctx.sql<{ id: string }[]>`select id::text from outbox`).map((r) => r.id);
    const [row] = await own.sql<{ n: number }[]>`select count(distinct event_id)::int as n from consumed where event_id = any(${ids}::uuid[])`;
    return row?.n === ids.length;
  }, SETTLE_MS, "every event's row in the subscriber's table", 200).catch(() => {});
  const outbox = await ctx.sql<{ n: number; unpublished: number }[]>`select count(*)::int as n, count(*) filter (where published_at is null)::int as unpublished from outbox`;
  const charges = await ctx.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  const ids = (await ctx.sql<{ id: string }[]>`select id::text from outbox`).map((r) => r.id);
  const [have] = await own.sql<{ n: number }[]>`select count(distinct event_id)::int as n from consumed where event_id = any(${ids}::uuid[])`;
  return { charges: charges[0]?.n ?? 0, outbox: outbox[0]?.n ?? 0, unpublished: outbox[0]?.unpublished ?? 0, lost: ids.length - (have?.n ?? 0) };
}

/** Exactly one row per committed event, none else; each charge's rows 1, 2, 3, … in order. */
async function rowChecks(ctx: Ctx, own: ScratchDatabase): Promise<void> {
  const events = await ctx.sql<{ id: string; charge: string; sequence: number }[]>`select id::text, aggregate_id::text as charge, sequence from outbox`;
  const rows = await own.sql<{ eventId: string; charge: string; sequence: number }[]>`select event_id::text as "eventId", charge_id::text as charge, sequence from consumed order by n`;
  const perEvent = new Map<string, number>();
  for (const row of rows) perEvent.set(row.eventId, (perEvent.get(row.eventId) ?? 0) + 1);
  const doubled = [...perEvent.values()].filter((n) => n > 1).length;
  const missing = events.filter((e) => !perEvent.has(e.id)).length;
  const known = new Set(events.map((e) => e.id));
  const stray = rows.filter((r) => !known.has(r.eventId)).length;
  ctx.checks.check(doubled === 0 && missing === 0 && stray === 0, `every committed event has exactly one row in the subscriber's table (${events.length} events)`,
    `${doubled} doubled, ${missing} missing, ${stray} not an event`);
  if (missing > 0) await explainMissing(ctx, own, events.filter((e) => !perEvent.has(e.id)).slice(0, 5));
  const byCharge = new Map<string, number[]>();
  for (const row of rows) byCharge.set(row.charge, [...(byCharge.get(row.charge) ?? []), row.sequence]);
  const off = [...byCharge.entries()].filter(([, seqs]) => seqs.some((s, i) => s !== i + 1));
  ctx.checks.check(off.length === 0, `each charge's rows are in sequence order, 1, 2, 3, … (${byCharge.size} charges)`,
    `${off.length} charges off, e.g. ${off[0]?.[0]}: ${off[0]?.[1].join(",")}`);
}

/** Where the first missing events stand at the subscriber: for the post-mortem. */
async function explainMissing(ctx: Ctx, own: ScratchDatabase, missing: readonly { id: string; charge: string; sequence: number }[]): Promise<void> {
  for (const e of missing) {
    const [state] = await own.sql<{ inbox: boolean; held: boolean; dead: string | null; last: number | null }[]>`
      select exists (select 1 from inbox where event_id = ${e.id}::uuid and consumer = ${ctx.consumer}) as inbox,
             exists (select 1 from subscriber_held_events where event_id = ${e.id}::uuid) as held,
             (select error from subscriber_dead_letters where event_id = ${e.id}::uuid) as dead,
             (select last_sequence from subscriber_sequences where aggregate_id = ${e.charge} and consumer = ${ctx.consumer}) as last`;
    const [last] = await ctx.sql<{ last: number }[]>`select last_sequence as last from charges where id = ${e.charge}::uuid`;
    console.log(`    missing ${e.id} seq ${e.sequence} of ${last?.last}: ${JSON.stringify(state)}`);
  }
}

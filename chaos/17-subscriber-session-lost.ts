// Scenario 17: the subscriber's session is lost. A private Mosquitto WITHOUT persistence serves
// the relay and the reference subscriber (examples/reference-subscriber.ts, given the API's URL and a
// token). Under charges and refunds, the subscriber stops (its session keeps what comes
// meanwhile at the broker), then the broker restarts and forgets the session with every event
// queued in it: the relay had their PUBACKs, so they are published and will never come again.
// The subscriber comes back, the load goes on, and each charge gets one more refund, so every
// lost event has a successor the subscriber receives. Proves: every event is processed once,
// each charge's in sequence order, no gap skipped: the gaps are filled from the API's
// GET /charges/:id/events before the gap timeout.
// CHAOS_17_SUBSCRIBER_WITHOUT_API=1 runs the subscriber without the API, which skips each gap
// at the timeout instead (docs/chaos.md, "Each scenario red").
import { existsSync } from "node:fs";
import { join } from "node:path";
import { mosquittoInstalled, privateMosquitto } from "../testkit/mosquitto.ts";
import { tokenFor } from "../testkit/auth.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { postUntilFinal, refundUntilFinal, type Answer } from "./lib/client.ts";
import { settle, scenario, type Ctx } from "./lib/report.ts";
import { skipScenario } from "./lib/skip.ts";
import { startSubscriber, type SubscriberView } from "./lib/subscriber.ts";

if (!mosquittoInstalled()) skipScenario("17", "it needs `mosquitto` on PATH for a broker it restarts without persistence (apt-get install mosquitto)");

const WITHOUT_API = process.env.CHAOS_17_SUBSCRIBER_WITHOUT_API === "1";
const WORKERS = 4;
// Charges with a refund before anything goes wrong: their next events come after a gap.
const FIRST_CHARGES = 20;
// Load on each side of the fault, and the events that must reach the lost session.
const LOAD_MS = 2_000;
const QUEUED_AT_LEAST = 40;
// The subscriber asks the API once a gap lasted this; it would skip the gap at the timeout.
const GAP_FILL_AFTER_MS = "1000";
const GAP_TIMEOUT_MS = "15000";
// Past the gap timeout: the subscriber without the API has skipped its gaps by then.
const SETTLE_MS = 40_000;
// The last refunds, this many at once (as many clients as the load had).
const TAIL_AT_ONCE = WORKERS;

const chargeIdOf = (a: Answer): string | undefined => (a.status === 201 ? (JSON.parse(a.body) as { id: string }).id : undefined);

await scenario("17", `the subscriber's session lost with a broker restarted without persistence${WITHOUT_API ? " (subscriber WITHOUT the API)" : ""}`, async (ctx) => {
  const { sql, checks, tally } = ctx;
  const broker = await privateMosquitto("persistence false\nmax_queued_messages 0");
  const api = await startApi(ctx.db.url, ctx.prefix);
  const subscriberEnv = {
    SUBSCRIBER_GAP_TIMEOUT_MS: GAP_TIMEOUT_MS,
    ...(!WITHOUT_API && { SUBSCRIBER_API_URL: api.base, SUBSCRIBER_API_TOKEN: await tokenFor(), SUBSCRIBER_GAP_FILL_AFTER_MS: GAP_FILL_AFTER_MS }),
  };
  const startSub = (continuing?: SubscriberView) => startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, broker.url, subscriberEnv, continuing);
  ctx.sub = await startSub();
  await startRelay(ctx.db.url, ctx.prefix, broker.url);
  const charges: string[] = [];
  const deadline = Date.now() + 60_000;
  const refund = (chargeId: string) => refundUntilFinal(() => api.base, chargeId, crypto.randomUUID(), 100, tally, deadline);
  const newCharge = async (i: number): Promise<string | undefined> => {
    const id = chargeIdOf(await postUntilFinal(() => api.base, crypto.randomUUID(), 100_000 + i, tally, deadline));
    if (id) charges.push(id);
    return id;
  };
  for (let i = 0; i < FIRST_CHARGES; i++) {
    const id = await newCharge(i);
    if (id) await refund(id);
  }

  // Charges and refunds of known charges, until `until` says stop.
  let stop = false;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      if (i % 3 === 0) await newCharge(w * 100_000 + i);
      else await refund(charges[Math.floor(Math.random() * charges.length)]!);
    }
  };
  const workers = Array.from({ length: WORKERS }, (_, w) => worker(w + 1));

  await sleep(LOAD_MS);
  // Away: what is published now waits in its session at the broker.
  const away = await sql<{ now: string }[]>`select now()::text as now`;
  await ctx.sub.stop();
  const queued = await waitUntil(async () => {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at > ${away[0]!.now}::timestamptz`;
    return (row?.n ?? 0) >= QUEUED_AT_LEAST ? row!.n : false;
  }, 20_000, `${QUEUED_AT_LEAST} events published into the away subscriber's session`).catch(() => 0);
  checks.check(queued >= QUEUED_AT_LEAST, `events were published into the subscriber's session while it was away (${queued})`);
  // SIGTERM: without persistence Mosquitto saves nothing, and comes back without the session.
  await broker.stop();
  checks.check(!existsSync(join(broker.dir, "mosquitto.db")), "the broker kept no persistence file: the session and its queued events are gone");
  await broker.start();
  ctx.sub = await startSub(ctx.sub);
  await sleep(LOAD_MS);
  stop = true;
  await Promise.all(workers);
  // One more event for every charge: each lost event is followed by one the subscriber receives.
  const tail = charges.values();
  await Promise.all(Array.from({ length: TAIL_AT_ONCE }, async () => {
    for (const id of tail) await refund(id);
  }));

  const t = await settle(ctx, SETTLE_MS);
  await orderChecks(ctx);
  checks.check(t.unpublished === 0, "every outbox row was published", `${t.unpublished} pending`);
  checks.check(t.lost === 0, "every event reached the subscriber, from the broker or the API (lost = 0)", `${t.lost} never processed`);
  const filled = ctx.sub.filled();
  checks.check(filled > 0, `the subscriber filled the gaps of the lost session from the API (${filled} events)`, "none filled");
  checks.check(ctx.sub.gapsSkipped() === 0, "no gap was skipped", `${ctx.sub.gapsSkipped()} events processed past a gap`);
  const failed = tally.count((a) => a.status >= 500 || a.status === 0);
  checks.check(failed === 0, "the API never failed (it does not need the broker)", `${failed} 5xx or unanswered`);
  await broker.stop();
  return t;
});

/** Each event processed once, each charge's in sequence order with none left out. */
async function orderChecks(ctx: Ctx): Promise<void> {
  const { sql, checks, consumer } = ctx;
  const sub = ctx.sub!;
  const [inbox] = await sql<{ dup: number; stray: number; total: number; outbox: number }[]>`
    select (select count(*)::int from (select event_id from inbox where consumer = ${consumer} group by event_id having count(*) > 1) d) as dup,
           (select count(*)::int from inbox i where consumer = ${consumer} and not exists (select 1 from outbox o where o.id = i.event_id)) as stray,
           (select count(*)::int from inbox where consumer = ${consumer}) as total,
           (select count(*)::int from outbox) as outbox`;
  checks.check(inbox?.dup === 0 && inbox.stray === 0 && inbox.total === inbox.outbox, "the inbox holds each event exactly once",
    `${inbox?.total} inbox rows for ${inbox?.outbox} events, ${inbox?.dup} doubled, ${inbox?.stray} unknown`);
  const twice = sub.processedTwice();
  checks.check(twice.length === 0, "the subscriber processed each event once", `${twice.length} processed again`);
  const last = await sql<{ id: string; last: number }[]>`select id::text, last_sequence as last from charges`;
  const broken = last.filter(({ id, last: n }) => (sub.processedOrder.get(id) ?? []).join(",") !== Array.from({ length: n }, (_, i) => i + 1).join(","));
  const example = broken[0] ? `${broken[0].id}: ${(sub.processedOrder.get(broken[0].id) ?? []).join(",")} of 1..${broken[0].last}` : "";
  checks.check(broken.length === 0, `for every charge the subscriber processed 1, 2, 3, … with none left out (${last.length} charges)`, `${broken.length} charges off, e.g. ${example}`);
}

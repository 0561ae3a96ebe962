// Scenario 11: order under fire. Charges each get several refunds at once, some for the same
// charge at the same time, through two API processes, while two relays (one claiming 3 rows at
// a time) are each SIGKILLed and restarted and the broker (persistence on) restarts once.
// Proves: every event arrives, and for every charge the first receipts are sequence 1, 2, 3, …
// with no inversion and no gap; no refund total exceeds its charge. Then quarantine: one
// charge's middle event is parked; its later events stay unpublished while other charges
// flow, and `bun run ops requeue` releases them in order.
import { pendingStats } from "../lib/ops/sql.ts";
import { privateMosquitto, type PrivateBroker } from "../testkit/mosquitto.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { firstReceiptOrder } from "../testkit/order.ts";
import { runToExit, type Child, type Service } from "../testkit/processes.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { hardKill, startApi, startRelay } from "./lib/harness.ts";
import { postUntilFinal, refundUntilFinal, type Answer } from "./lib/client.ts";
import { settle, scenario, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const CHARGES = 60;
// Room for a few hundred refunds each: most of the load creates refunds, a few exceed what is left.
const AMOUNT_CENTS = 200_000;
// Refunds fired at one charge at the same moment, spread over the two APIs.
const AT_ONCE = 3;
const WORKERS = 6;
// Between faults: long enough for refunds to flow through each state (a relay down, both up).
const FAULT_GAP_MS = 1_500;
// The small relay's claims: a few rows, so its claims and the other relay's interleave.
const SMALL_BATCH = "3";
const SETTLE_MS = 40_000;

interface Run {
  readonly ctx: Ctx;
  readonly apis: Service[];
  readonly broker: PrivateBroker;
  readonly relays: { large: Child; small: Child };
  readonly collector: Collector;
  /** Ids from every refund answered 201. */
  readonly refundIds: Set<string>;
}

function startRelays(ctx: Ctx, broker: PrivateBroker): Promise<[Child, Child]> {
  return Promise.all([
    startRelay(ctx.db.url, ctx.prefix, broker.url),
    startRelay(ctx.db.url, ctx.prefix, broker.url, { OUTBOX_BATCH_SIZE: SMALL_BATCH }),
  ]);
}

const chargeIdOf = (a: Answer): string | undefined => (a.status === 201 ? (JSON.parse(a.body) as { id: string }).id : undefined);

async function createCharges(run: Run, count: number): Promise<string[]> {
  const deadline = Date.now() + 20_000;
  const answers = await Promise.all(
    Array.from({ length: count }, (_, i) => postUntilFinal(() => run.apis[i % 2]!.base, crypto.randomUUID(), AMOUNT_CENTS, run.ctx.tally, deadline)),
  );
  return answers.map(chargeIdOf).filter((id): id is string => id !== undefined);
}

async function refund(run: Run, api: number, chargeId: string, amountCents: number, deadline: number): Promise<void> {
  const answer = await refundUntilFinal(() => run.apis[api % 2]!.base, chargeId, crypto.randomUUID(), amountCents, run.ctx.tally, deadline);
  const id = chargeIdOf(answer);
  if (id) run.refundIds.add(id);
}

/** AT_ONCE refunds of one charge at the same moment, alternating between the APIs. */
async function refundsAtOnce(run: Run, chargeId: string, deadline: number): Promise<void> {
  await Promise.all(Array.from({ length: AT_ONCE }, (_, i) => refund(run, i, chargeId, 100 + Math.floor(Math.random() * 800), deadline)));
}

/** The faults, one after another: each relay SIGKILLed and restarted, then the broker restarted. */
async function faults(run: Run): Promise<void> {
  const { ctx, broker } = run;
  await sleep(FAULT_GAP_MS);
  await hardKill(run.relays.large);
  run.relays.large = await startRelay(ctx.db.url, ctx.prefix, broker.url);
  await sleep(FAULT_GAP_MS);
  await hardKill(run.relays.small);
  run.relays.small = await startRelay(ctx.db.url, ctx.prefix, broker.url, { OUTBOX_BATCH_SIZE: SMALL_BATCH });
  await sleep(FAULT_GAP_MS);
  await broker.stop();
  await sleep(FAULT_GAP_MS / 3);
  await broker.start();
  await sleep(FAULT_GAP_MS);
}

async function refundsUnderFire(run: Run, charges: readonly string[]): Promise<void> {
  let done = false;
  const deadline = Date.now() + 60_000;
  const worker = async (): Promise<void> => {
    while (!done) await refundsAtOnce(run, charges[Math.floor(Math.random() * charges.length)]!, deadline);
  };
  const workers = Array.from({ length: WORKERS }, worker);
  await faults(run);
  done = true;
  await Promise.all(workers);
}

/** Rows, sequences and totals: what the refunds wrote, checked charge by charge. */
async function ledgerChecks(run: Run): Promise<void> {
  const { sql, checks } = run.ctx;
  const [row] = await sql<{ wrong_events: number; wrong_total: number; over: number; refunds: number }[]>`
    select count(*) filter (where events <> 1 + refunds or last_sequence <> 1 + refunds)::int as wrong_events,
           count(*) filter (where refunded_cents <> refunded)::int as wrong_total,
           count(*) filter (where refunded_cents > amount_cents)::int as over,
           sum(refunds)::int as refunds
    from (select c.last_sequence, c.refunded_cents, c.amount_cents,
                 (select count(*) from outbox o where o.aggregate_id = c.id) as events,
                 (select count(*) from refunds r where r.charge_id = c.id) as refunds,
                 (select coalesce(sum(r.amount_cents), 0) from refunds r where r.charge_id = c.id) as refunded
            from charges c) as per_charge`;
  const ids = [...run.refundIds];
  const [found] = await sql<{ n: number }[]>`select count(*)::int as n from refunds where id = any(${ids}::uuid[])`;
  checks.check(ids.length > 0 && found?.n === ids.length && row?.refunds === ids.length, "every refund answered 201 is in the refunds table, and no other", `${found?.n} of ${ids.length} found, ${row?.refunds} rows`);
  checks.check(row?.wrong_events === 0, "each charge has one ChargeCreated and one event per refund, its last_sequence their count", `${row?.wrong_events} charges off`);
  checks.check(row?.wrong_total === 0 && row?.over === 0, "no refund total exceeds its charge, and each equals the sum of its refunds", `${row?.over} over, ${row?.wrong_total} wrong`);
}

async function deliveryChecks(run: Run, what: string): Promise<void> {
  const { ctx, collector } = run;
  const t = await settle(ctx, SETTLE_MS);
  const outbox = t.outbox;
  await waitUntil(() => collector.firstArrivals().size >= outbox, SETTLE_MS, "every event at the order collector").catch(() => {});
  ctx.checks.check(t.unpublished === 0 && t.lost === 0, `${what}: every outbox row was published and reached the subscriber (lost = 0)`, `${t.unpublished} pending, ${t.lost} lost`);
  const order = firstReceiptOrder(collector.messages);
  ctx.checks.check(
    order.broken === 0 && order.events === outbox,
    `${what}: for every charge the first receipts are sequence 1, 2, 3, … (${order.events} events of ${order.aggregates} charges)`,
    `${order.broken} out of turn, ${order.events} of ${outbox} received: ${order.violations.slice(0, 3).join("; ")}`,
  );
}

await scenario("11", "order under fire: refunds through two APIs, two relays SIGKILLed, a broker restart, a quarantine", async (ctx) => {
  const broker = await privateMosquitto("max_queued_messages 0");
  // 8 connections each (its 6 workers send 3 refunds at a time): two APIs, two relays and a
  // subscriber fit on a server other work shares (a run aborted on "too many clients" with 32).
  const pool = { API_POOL_SIZE: "8" };
  const apis = await Promise.all([startApi(ctx.db.url, ctx.prefix, undefined, pool), startApi(ctx.db.url, ctx.prefix, undefined, pool)]);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, broker.url);
  const collector = await collect(broker.url, ctx.prefix, { clientId: `chaos-11-order-${ctx.consumer}`, persistent: true });
  const [large, small] = await startRelays(ctx, broker);
  const run: Run = { ctx, apis, broker, relays: { large, small }, collector, refundIds: new Set() };
  try {
    const charges = await createCharges(run, CHARGES);
    await refundsUnderFire(run, charges);
    const up = !run.relays.large.exited && !run.relays.small.exited && !ctx.sub.child.exited;
    ctx.checks.check(up, "both relays, SIGKILLed mid-flow and started again, and the subscriber stayed up through the broker restart");
    const failed = ctx.tally.count((a) => a.status >= 500 || a.status === 0);
    ctx.checks.check(failed === 0, "the APIs never failed and always answered (they do not need the relay or the broker)", `${failed} 5xx or unanswered`);
    await deliveryChecks(run, "under fire");
    await ledgerChecks(run);
    await quarantine(run);
    await deliveryChecks(run, "after the requeue");
    const t = await settle(ctx, 1000);
    return t;
  } finally {
    await collector.close();
    await broker.stop();
  }
});

/** One charge's middle event parked: its later events wait, the others flow, a requeue releases them in order. */
async function quarantine(run: Run): Promise<void> {
  const { ctx } = run;
  const { sql, checks } = ctx;
  await Promise.all([run.relays.large.stop(), run.relays.small.stop()]);
  const [held, ...others] = await createCharges(run, 6);
  const deadline = Date.now() + 20_000;
  for (let i = 0; i < 3; i++) await refund(run, i, held!, 100, deadline);
  await Promise.all(others.map((id) => refundsAtOnce(run, id, deadline)));
  const [middle] = await sql<{ id: string }[]>`select id::text from outbox where aggregate_id = ${held!} and sequence = 2`;
  // Parked as the relay parks a row it can never publish (an operator's quarantine is the same update).
  await sql`update outbox set parked_at = now(), attempts = 10, last_error = 'quarantined by chaos 11' where id = ${middle!.id}`;
  const [large, small] = await startRelays(ctx, run.broker);
  run.relays.large = large;
  run.relays.small = small;
  const waiting = await waitUntil(async () => {
    const stats = await pendingStats(sql);
    return stats.pending === 2 && stats.parked === 1 ? stats : false;
  }, SETTLE_MS, "every row but the quarantined charge's published").catch(() => undefined);
  const rows = await sql<{ sequence: number; published: boolean; attempts: number }[]>`
    select sequence, published_at is not null as published, attempts from outbox where aggregate_id = ${held!} order by sequence`;
  const shape = rows.map((r) => `${r.sequence}:${r.published ? "published" : r.attempts > 0 ? "attempted" : "held"}`).join(" ");
  checks.check(waiting !== undefined && shape === "1:published 2:attempted 3:held 4:held", "quarantine: the parked event's charge waits behind it (its later events never attempted) while every other charge flowed", shape);
  checks.check(waiting?.held === 2, "quarantine: the held-rows gauge counts the 2 events waiting behind the parked one", `held ${waiting?.held}`);
  const before = run.collector.firstArrivals().size;
  const requeued = await runToExit(["bun", "run", "ops", "requeue", middle!.id], { DATABASE_URL: ctx.db.url, LOG_LEVEL: "warn" });
  checks.check(requeued.code === 0 && requeued.stdout.includes('"requeued":1'), "bun run ops requeue <id> put the parked row back in line", requeued.stdout.trim() || requeued.stderr.trim());
  await waitUntil(() => run.collector.firstArrivals().size >= before + 3, SETTLE_MS, "the released events").catch(() => {});
  const after = [...run.collector.firstArrivals().values()].slice(before).map((m) => m.envelope?.sequence);
  checks.check(after.join(",") === "2,3,4", "quarantine: the requeue released the charge's events in order, 2, 3, 4", after.join(","));
}

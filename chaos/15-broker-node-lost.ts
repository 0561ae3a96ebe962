// Scenario 15: a broker node lost. A private 3-node MQTT cluster serves the relay, given
// MQTT_URL n1,n2,n3, and the reference subscriber, given n3,n2,n1: each starts on its own node.
// By default the cluster is three aedes processes over one private Redis (testkit/aedes-cluster.ts:
// sessions and QoS 1 messages queued in Redis before the PUBACK); CHAOS_BROKER_CLUSTER=nats runs
// it on three NATS nodes with MQTT and JetStream instead (testkit/nats.ts). Under a load of
// charges and refunds, n1, the node the relay publishes to, is SIGKILLed (no goodbye to the
// cluster or its clients), and started again; once it has caught up, n3, the node the subscriber
// reads from, the same way. Proves: the relay moves to n2 and publishes again within a stated
// bound; the subscriber moves to n2 and gets what its session had queued; every committed event
// reaches the subscriber and is processed once, each charge's in `sequence` order; a persistent
// collector on n2 sees each charge's first receipts in order; no row is parked for the loss;
// nothing is restarted but the nodes.
// One node lost at a time: a NATS cluster of three keeps its replicated state with two, not one.
// Deterministic: each step comes once the subscriber has processed a count of events since the
// last, n1 is started again once the relay publishes on another node or the bound has passed
// (a relay that does not move is seen failing the bound, never rescued by the restart), and n3
// goes once every replica of the cluster's state is current again (the load paused for it; at
// once on aedes, whose nodes keep no state of their own).
// Known limit of the NATS path: Debian's NATS 2.9.10 sometimes leaves the restarted node's
// replica behind for good, and loses QoS 1 messages across the session move (docs/chaos.md).
// CHAOS_15_RELAY_FIRST_URL_ONLY=1 gives the relay n1 alone: the relay that keeps only the first
// URL, to show the scenario red (docs/chaos.md).
import { collect, type Collector } from "../testkit/mqtt.ts";
import { aedesCluster, aedesClusterMissing } from "../testkit/aedes-cluster.ts";
import type { BrokerCluster } from "../testkit/broker-cluster.ts";
import { natsCluster, natsMissing } from "../testkit/nats.ts";
import { firstReceiptOrder } from "../testkit/order.ts";
import type { Service } from "../testkit/processes.ts";
import { sleep, waitUntil, within } from "../testkit/wait.ts";
import { startApi, startRelayService } from "./lib/harness.ts";
import { postUntilFinal, refundUntilFinal } from "./lib/client.ts";
import { settle, scenario, type Ctx, type Totals } from "./lib/report.ts";
import { skipScenario } from "./lib/skip.ts";
import { startSubscriber, type SubscriberView } from "./lib/subscriber.ts";

// NATS is opt-in: Debian's NATS 2.9.10, the only one installable here, itself loses QoS 1
// events across a node loss in most runs while every relay check holds (docs/chaos.md,
// scenario 15), so a default run on it would be red for the broker, not for this code.
const onNats = process.env.CHAOS_BROKER_CLUSTER === "nats";
const missing = onNats ? natsMissing() : aedesClusterMissing();
if (missing !== undefined) skipScenario("15", `a broker node lost needs ${onNats ? "a NATS" : "an aedes"} cluster: ${missing}`);

// The promise: the relay publishes again this soon after its node is SIGKILLed. It sees the
// loss at once (the kernel closes the dead node's sockets) and moves to the next node after its
// first reconnect delay (250 ms). An aedes node answers the CONNECT at once, so 5 s is about
// ten times the slowest move measured (docs/chaos.md, Limits), room for a machine loaded by
// other work. A NATS node answers once JetStream has elected new leaders for what the lost
// node led (seconds); one that hangs instead costs a CONNECT timeout (5 s) before the next:
// 15 s covers an election and two of those.
const REPUBLISH_BOUND_MS = onNats ? 15_000 : 5000;
// Events processed by the subscriber between one step and the next: the load flows in each state.
const EVENTS_PER_STEP = 40;
// Bounds a step whose condition never comes; the checks below then report it, with the numbers.
const STEP_TIMEOUT_MS = 20_000;
const SETTLE_MS = 30_000;
// A restarted node, the load paused, catches up within seconds (about 4 s measured).
const CATCH_UP_MS = 30_000;
const WORKERS = 4;
// The API's connections: plenty for WORKERS clients, and a server other work shares has room
// (a run beside other work aborted on 'too many clients' with the default 32), as 11's and 14's.
const API_POOL = { API_POOL_SIZE: "8" };
// Paced: about 30 events a second, well within what one subscriber processes as they come.
const PAUSE_MS = 100;
// Room for a few hundred refunds each.
const AMOUNT_CENTS = 100_000;
const firstUrlOnly = process.env.CHAOS_15_RELAY_FIRST_URL_ONLY === "1";

interface Run {
  readonly ctx: Ctx;
  readonly cluster: BrokerCluster;
  readonly api: Service;
  readonly relay: Service;
  readonly sub: SubscriberView;
  readonly collector: Collector;
}

/** Charges and refunds of them, until `stop` says so; none while `paused` says so. */
function load(run: Run, stop: () => boolean, paused: () => boolean): Promise<void> {
  const charges: string[] = [];
  const deadline = (): number => Date.now() + 20_000;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; !stop(); i++) {
      if (paused()) {
        await sleep(PAUSE_MS);
        continue;
      }
      const chargeId = charges[Math.floor(Math.random() * charges.length)];
      if (chargeId === undefined || i % 3 === 0) {
        const a = await postUntilFinal(() => run.api.base, crypto.randomUUID(), AMOUNT_CENTS + w, run.ctx.tally, deadline());
        if (a.status === 201) charges.push((JSON.parse(a.body) as { id: string }).id);
      } else {
        await refundUntilFinal(() => run.api.base, chargeId, crypto.randomUUID(), 100 + Math.floor(Math.random() * 400), run.ctx.tally, deadline());
      }
      await sleep(PAUSE_MS);
    }
  };
  return Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w))).then(() => {});
}

const processed = (sub: SubscriberView): number => sub.deliveries() - sub.droppedByInbox();

/** Until the subscriber has processed `count` more events (bounded: the checks report a shortfall). */
async function eventsFlow(sub: SubscriberView, count = EVENTS_PER_STEP): Promise<boolean> {
  const target = processed(sub) + count;
  return waitUntil(() => processed(sub) >= target, STEP_TIMEOUT_MS, `${count} events processed`).then(() => true, () => false);
}

async function readyz(relay: Service): Promise<Record<string, unknown>> {
  const answer = await within(fetch(`${relay.base}/readyz`).then((r) => r.json() as Promise<Record<string, unknown>>), 2000).catch(() => undefined);
  return answer ?? {};
}

const clock = async (ctx: Ctx): Promise<string> => (await ctx.sql<{ t: string }[]>`select clock_timestamp()::text as t`)[0]!.t;

/** n1 lost: ms from the kill to the first row created after it and published, or undefined past the bound. */
async function relayNodeLost(run: Run): Promise<number | undefined> {
  const { sql } = run.ctx;
  await run.cluster.nodes[0]!.kill();
  const killedAt = await clock(run.ctx);
  const republished = await waitUntil(async () => {
    const [row] = await sql<{ ms: number | null }[]>`
      select extract(epoch from min(published_at) - ${killedAt}::timestamptz) * 1000 as ms
        from outbox where created_at > ${killedAt}::timestamptz and published_at is not null`;
    return row?.ms ?? undefined;
  }, REPUBLISH_BOUND_MS, "a row published after the kill", 50).catch(() => undefined);
  return republished === undefined ? undefined : Math.round(republished);
}

/**
 * Rows published after `since` (n3's loss) and before the first of them reached the subscriber,
 * which it can only have got through another node: what its session held for it meanwhile.
 */
async function queuedForSession(ctx: Ctx, since: string): Promise<number> {
  const [row] = await ctx.sql<{ n: number }[]>`
    with first as (
      select min(i.received_at) as at from inbox i join outbox o on o.id = i.event_id
       where i.consumer = ${ctx.consumer} and o.published_at > ${since}::timestamptz)
    select count(*)::int as n from outbox, first where published_at > ${since}::timestamptz and published_at < first.at`;
  return row?.n ?? 0;
}

async function body(ctx: Ctx, cluster: BrokerCluster): Promise<Totals> {
  const [n1, n2, n3] = cluster.mqttUrls as [string, string, string];
  const { checks } = ctx;
  const api = await startApi(ctx.db.url, ctx.prefix, undefined, API_POOL);
  const sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, [n3, n2, n1].join(","));
  ctx.sub = sub;
  const relay = await startRelayService(ctx.db.url, ctx.prefix, firstUrlOnly ? n1 : cluster.mqttUrls.join(","));
  const collector = await collect(n2, ctx.prefix, { clientId: `chaos-15-order-${ctx.consumer}`, persistent: true });
  const run: Run = { ctx, cluster, api, relay, sub, collector };
  let stopped = false;
  let paused = false;
  const traffic = load(run, () => stopped, () => paused);
  try {
    checks.check(await eventsFlow(sub), `the load flows: ${EVENTS_PER_STEP} events processed before the first kill`);
    const before = await readyz(relay);
    checks.check(before.brokerUrl === n1 && sub.broker() === n3, "the relay publishes to n1 and the subscriber reads from n3, another node", `relay ${String(before.brokerUrl)}, subscriber ${sub.broker()}`);

    const republishMs = await relayNodeLost(run);
    console.log(`  (relay publishing again ${republishMs === undefined ? `not within ${REPUBLISH_BOUND_MS} ms` : `${republishMs} ms after its node was SIGKILLed`})`);
    checks.check(republishMs !== undefined, `the relay published again within ${REPUBLISH_BOUND_MS / 1000} s of losing its node`, `${republishMs ?? "no row"} published`);
    const after = await readyz(relay);
    // n2 unless n2 too closed the connection while JetStream elected new leaders (then n3).
    checks.check(after.brokerUrl !== n1 && after.broker === "connected", "the relay's /readyz names another node of its list, connected", `${String(after.brokerUrl)} ${String(after.broker)}`);
    // One node lost at a time: n1 has caught up before n3 goes. With n1's replicas behind, the
    // loss of n3 leaves the sessions' and messages' replicated state one current copy, no
    // quorum: NATS 2.9 then lost acknowledged QoS 1 messages of the subscriber's session. Its
    // restarted replicas catch up when started while nothing is published, and may never under
    // a steady rate (docs/chaos.md): the load pauses from the restart until they have, as an
    // operator would bring a node back before taking another down.
    paused = true;
    await cluster.nodes[0]!.start();
    const caughtUp = await cluster.caughtUp(1, CATCH_UP_MS).then(() => true, () => false);
    paused = false;
    checks.check(caughtUp, `n1, started again, caught up with the cluster within ${CATCH_UP_MS / 1000} s (the load paused)`);
    checks.check(await eventsFlow(sub), "events flow with n1 back in the cluster");

    const subscriberLostAt = await clock(ctx);
    await cluster.nodes[2]!.kill();
    const moved = await eventsFlow(sub);
    await cluster.nodes[2]!.start();
    console.log(`  (${await queuedForSession(ctx, subscriberLostAt)} events published after the loss of n3 before the first of them reached the subscriber: its session held them)`);
    checks.check(moved && sub.moves.length === 1 && sub.moves[0]?.from === n3 && sub.moves[0]?.to === n2, "the subscriber lost n3, moved to n2 once, and processed events there", `${JSON.stringify(sub.moves)}, flowing: ${moved}`);
    checks.check(await eventsFlow(sub), "events flow with n3 back in the cluster");
  } finally {
    stopped = true;
    await traffic;
  }
  return finalChecks(run);
}

async function finalChecks(run: Run): Promise<Totals> {
  const { ctx, sub, relay, collector } = run;
  const { checks, sql } = ctx;
  const t = await settle(ctx, SETTLE_MS);
  checks.check(t.unpublished === 0 && t.lost === 0, "every committed event was published and reached the subscriber (lost = 0)", `${t.unpublished} pending, ${t.lost} lost of ${t.outbox}`);
  const [inbox] = await sql<{ dup: number; total: number }[]>`
    select (select count(*)::int from (select event_id from inbox where consumer = ${ctx.consumer} group by event_id having count(*) > 1) d) as dup,
           (select count(*)::int from inbox where consumer = ${ctx.consumer}) as total`;
  checks.check(inbox?.dup === 0 && inbox.total === t.outbox && sub.processedTwice().length === 0, "the subscriber processed each event once (the inbox holds each once)", `${inbox?.total} inbox rows for ${t.outbox} events, ${inbox?.dup} doubled`);
  const outOfTurn = [...sub.processedOrder].filter(([, seqs]) => seqs.some((s, i) => s !== i + 1));
  checks.check(outOfTurn.length === 0 && sub.gapsSkipped() === 0, `the subscriber processed each charge's events in sequence order (${sub.processedOrder.size} charges)`, `${outOfTurn.length} charges out of order, e.g. ${JSON.stringify(outOfTurn[0])}; ${sub.gapsSkipped()} gaps skipped`);
  await waitUntil(() => collector.firstArrivals().size >= t.outbox, SETTLE_MS, "every event at the collector on n2").catch(() => {});
  const order = firstReceiptOrder(collector.messages);
  checks.check(order.broken === 0 && order.events === t.outbox, `the first receipts at a persistent collector on n2 are each charge's sequence 1, 2, 3, … (${order.events} events)`, `${order.broken} out of turn, ${order.events} of ${t.outbox}: ${order.violations.slice(0, 2).join("; ")}`);
  const [parked] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where parked_at is not null`;
  checks.check(parked?.n === 0, "no row was parked for the loss of a node", `${parked?.n} parked`);
  checks.check(!relay.child.exited && !sub.child.exited, "the relay and the subscriber stayed up (neither restarted)");
  const failed = ctx.tally.count((a) => a.status >= 500 || a.status === 0);
  checks.check(failed === 0, "the API never failed (it does not need the broker)", `${failed} 5xx or unanswered`);
  await collector.close();
  return t;
}

await scenario("15", `a broker node lost: ${onNats ? "NATS" : "aedes"} cluster nodes SIGKILLed under the relay and under the subscriber${firstUrlOnly ? " (relay given n1 only)" : ""}`, async (ctx) => {
  const cluster = onNats ? await natsCluster() : await aedesCluster();
  try {
    return await body(ctx, cluster);
  } finally {
    await cluster.stop();
  }
});

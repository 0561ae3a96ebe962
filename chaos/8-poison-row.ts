// Scenario 8: a poison row amid traffic. A private Mosquitto (MQTT 5) accepts packets of at
// most 2 KB; while clients keep creating charges, the harness writes one charge whose outbox
// row carries a 10 KB event (the API cannot: its body is an integer amount), in one transaction
// with the same columns the API writes. The broker answers that publish with DISCONNECT 0x95
// (packet too large) and closes the connection. Proves: the relay parks that row at once
// (an attempt counted, the reason code in last_error) instead of claiming it first after every
// reconnect, and every other row flows, in commit order, each processed once.
// Deterministic without sleeps: the poison row goes in once events flow, the load runs until
// the row is parked and a count of charges has been created after it; order is judged only on
// pairs of charges where one was answered 201 before the other's request was sent (so it
// committed before the other's transaction began: no claim can take the later one first).
import type { Sql } from "../lib/platform/db.ts";
import { CHARGE_CREATED, chargeCreatedPayload } from "../lib/charges/events.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { privateMosquitto } from "../testkit/mosquitto.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { chaosChild, startApi } from "./lib/harness.ts";
import { postUntilFinal, type Answer } from "./lib/client.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const WORKERS = 4;
// Pacing, so the reference subscriber (one inbox transaction per event) keeps up.
const PAUSE_MS = 40;
// Events delivered before the poison row is written, and charges created after it.
const DELIVERED_BEFORE = 20;
const CREATED_AFTER = 40;
// Bounds a phase whose condition never comes; the checks below then report it.
const PHASE_TIMEOUT_MS = 20_000;
// Far above a ChargeCreated publish (~500 bytes with its properties), far below the poison row.
const MAX_PACKET_SIZE = 2048;
const POISON_PADDING_CHARS = 10_000;
// The subscriber's queue never drops an event during the scenario.
const BROKER_CONFIG = `max_packet_size ${MAX_PACKET_SIZE}\nmax_queued_messages 100000`;
// As the harness's relays: a missed wake-up costs little time.
const RELAY_POLL_MS = "250";

interface Sent {
  readonly sentAt: number;
  readonly answer: Answer;
}

interface PoisonState {
  readonly published: boolean;
  readonly parked: boolean;
  readonly attempts: number;
  readonly last_error: string | null;
}

/** A charge and its outbox row in one transaction, as the API writes them, with a 10 KB event. */
async function insertPoison(sql: Sql): Promise<string> {
  const chargeId = crypto.randomUUID();
  const id = crypto.randomUUID();
  const amountCents = 4900;
  const data = JSON.parse(chargeCreatedPayload({ chargeId, amountCents })) as Record<string, unknown>;
  const payload = JSON.stringify({ ...data, note: "x".repeat(POISON_PADDING_CHARS) });
  await sql.begin(async (tx) => {
    await tx`insert into charges (id, tenant, amount_cents) values (${chargeId}, ${TEST_TENANT}, ${amountCents})`;
    await tx`insert into outbox (id, aggregate_id, tenant, event_type, payload)
             values (${id}, ${chargeId}, ${TEST_TENANT}, ${CHARGE_CREATED}, ${payload})`;
  });
  return id;
}

async function poisonState(sql: Sql, id: string): Promise<PoisonState | undefined> {
  const [row] = await sql<PoisonState[]>`
    select published_at is not null as published, parked_at is not null as parked, attempts, last_error
      from outbox where id = ${id}`;
  return row;
}

/** The relay on the private broker, with its HTTP port known (for /metrics). */
async function startRelayService(ctx: Ctx, mqttUrl: string): Promise<Service> {
  const env = { DATABASE_URL: ctx.db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: ctx.prefix, OUTBOX_POLL_MS: RELAY_POLL_MS };
  return startEntrypoint("relay", chaosChild("relay", env));
}

/** outbox_publish_errors_total of the scenario's topics, from the relay's /metrics. */
async function publishErrors(relay: Service, prefix: string): Promise<number> {
  const text = await fetch(`${relay.base}/metrics`).then((r) => r.text(), () => "");
  return text
    .split("\n")
    .filter((line) => line.startsWith("outbox_publish_errors_total{") && line.includes(prefix))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
}

/**
 * Pairs (a, b) where a's charge was answered 201 before b's request was sent, and a's event
 * did not reach the subscriber before b's (first arrival). Returns [pairs judged, out of order].
 */
function orderViolations(sent: readonly Sent[], eventOf: Map<string, string>, arrivalOrder: Map<string, number>): [number, number] {
  const delivered = sent.flatMap((s) => {
    const chargeId = s.answer.status === 201 ? (JSON.parse(s.answer.body) as { id?: string }).id : undefined;
    const position = arrivalOrder.get(eventOf.get(chargeId ?? "") ?? "");
    return position === undefined ? [] : [{ sentAt: s.sentAt, answeredAt: s.answer.at, position }];
  });
  let pairs = 0;
  let wrong = 0;
  for (const a of delivered) {
    for (const b of delivered) {
      if (a.answeredAt >= b.sentAt) continue;
      pairs += 1;
      if (a.position > b.position) wrong += 1;
    }
  }
  return [pairs, wrong];
}

await scenario("8", "poison row amid traffic", async (ctx) => {
  const { sql, checks, tally } = ctx;
  const broker = await privateMosquitto(BROKER_CONFIG);
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, broker.url);
  const sub = ctx.sub;
  const relay = await startRelayService(ctx, broker.url);

  const sent: Sent[] = [];
  let loading = true;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; loading; i++) {
      const sentAt = Date.now();
      const answer = await postUntilFinal(() => api.base, crypto.randomUUID(), 1 + w * 100_000 + i, tally, Date.now() + PHASE_TIMEOUT_MS);
      sent.push({ sentAt, answer });
      await sleep(PAUSE_MS);
    }
  };
  let poison = "";
  let poisonCommittedAt = 0;
  let parked: PoisonState | undefined;
  const createdAfter = (): Sent[] => sent.filter((s) => s.sentAt > poisonCommittedAt && s.answer.status === 201);
  const phases = async (): Promise<void> => {
    try {
      await waitUntil(() => sub.arrivals.size >= DELIVERED_BEFORE, PHASE_TIMEOUT_MS, `${DELIVERED_BEFORE} events delivered`);
      poison = await insertPoison(sql);
      poisonCommittedAt = Date.now();
      parked = await waitUntil(async () => {
        const state = await poisonState(sql, poison);
        return state?.parked ? state : undefined;
      }, PHASE_TIMEOUT_MS, "the poison row to be parked").catch(() => undefined); // reported below
      await waitUntil(() => createdAfter().length >= CREATED_AFTER, PHASE_TIMEOUT_MS, `${CREATED_AFTER} charges after the poison row`)
        .catch(() => {}); // reported below
    } finally {
      loading = false;
    }
  };
  await Promise.all([phases(), ...Array.from({ length: WORKERS }, (_, w) => worker(w))]);
  if (!poison) throw new Error("the load never got going: no poison row written");

  const state = parked ?? (await poisonState(sql, poison));
  checks.check(state?.parked === true && state.published === false && state.attempts >= 1,
    "the poison row was parked (parked_at set, published_at null, attempts >= 1)", JSON.stringify({ ...state, last_error: undefined }));
  checks.check(state?.last_error?.includes("0x95") === true, "its last_error names the broker's DISCONNECT reason 0x95 (packet too large)",
    `last_error: ${state?.last_error ?? "null"}`);
  const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS, [poison]);
  const after = createdAfter();
  const events = await sql<{ id: string; charge: string }[]>`select id::text, aggregate_id::text as charge from outbox`;
  const eventOf = new Map(events.map((e) => [e.charge, e.id]));
  const afterDelivered = after.filter((s) => sub.arrivals.has(eventOf.get((JSON.parse(s.answer.body) as { id: string }).id) ?? ""));
  checks.check(after.length >= CREATED_AFTER && afterDelivered.length === after.length,
    `every charge created after the poison row reached the subscriber (${after.length} charges)`,
    `${afterDelivered.length} of ${after.length} delivered`);
  const arrivalOrder = new Map([...sub.arrivals.keys()].map((id, i) => [id, i]));
  const [pairs, wrong] = orderViolations(sent, eventOf, arrivalOrder);
  checks.check(pairs > 0 && wrong === 0,
    `events arrived in commit order: of ${pairs} pairs where one charge was answered 201 before the other was sent, the first answered arrived first`,
    `${wrong} pairs out of order`);
  checks.check(!sub.arrivals.has(poison), "the poison row's event never reached the subscriber");
  const [others] = await sql<{ parked: number; touched: number }[]>`
    select count(*) filter (where parked_at is not null)::int as parked,
           count(*) filter (where attempts > 0 or releases > 0)::int as touched
      from outbox where id <> ${poison}`;
  checks.check(others?.parked === 0 && others.touched === 0,
    "no other row was parked or counted an attempt or release (the rows in flight with it went back untouched)",
    `${others?.parked} parked, ${others?.touched} with attempts or releases`);
  const errors = await publishErrors(relay, ctx.prefix);
  checks.check(errors >= 1, `the relay's /metrics counted the refused publish: outbox_publish_errors_total = ${errors}`, `${errors}`);
  checks.check(!relay.child.exited, "the relay process stayed up (never restarted)", `exit ${relay.child.exitCode}`);
  checks.check(!sub.child.exited, "the subscriber stayed up");
  checks.check(tally.count((a) => a.status >= 500 || a.status === 0) === 0, "the API never failed (it does not need the broker)");
  console.log(`  (the poison row is left out of the delivery counts: ${totals.outbox} outbox rows to deliver, ${totals.charges} charges)`);
  return totals;
});

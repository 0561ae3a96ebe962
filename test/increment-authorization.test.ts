// POST /charges/:id/increment-authorization: an authorized charge's amount raised to a new
// total, in the ledger (PAYMENT_PROCESSOR=none) and through the processor (the simulator's
// increment_authorization), with the key contract every operation has; its event published on
// MQTT by a real relay. What is asserted is the answer, the rows, the events and the
// simulator's ledger.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { ChargesClient } from "../client/index.ts";
import { apiTestContext, getCharge, postCharge } from "../testkit/api.ts";
import { authHeaders, tokenFor } from "../testkit/auth.ts";
import { collect } from "../testkit/mqtt.ts";
import { expireLease, paymentsOf, processorEnv, processorTestContext } from "../testkit/processor.ts";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { stripeFor } from "../testkit/processor-sim.ts";
import { expectProblem, newCharge } from "../testkit/refunds.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/platform/db.ts";

setDefaultTimeout(30_000);

const ledger = await apiTestContext("increment_ledger");
const processor = await processorTestContext("increment_processor", 1500);
const key = () => crypto.randomUUID();
type ChargeJson = Record<string, unknown> & { id: string };

async function authorize(api: ApiProcess, amountCents: number, paymentMethod?: string): Promise<ChargeJson> {
  const res = await postCharge(api, JSON.stringify({ amountCents, capture: "manual", ...(paymentMethod && { paymentMethod }) }), { key: key() });
  expect(res.status).toBe(201);
  return (await res.json()) as ChargeJson;
}

async function post(api: ApiProcess, chargeId: string, action: string, k: string, body: string): Promise<Response> {
  const headers = { "content-type": "application/json", "idempotency-key": k, ...(await authHeaders("tenant-a")) };
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/${action}`, { method: "POST", headers, body }));
}
const increment = (api: ApiProcess, chargeId: string, amountCents: number, k = key()) => post(api, chargeId, "increment-authorization", k, JSON.stringify({ amountCents }));

const eventsOf = (sql: Sql, chargeId: string) =>
  sql<{ event_type: string; sequence: number; payload: string }[]>`select event_type, sequence, payload from outbox where aggregate_id = ${chargeId} order by sequence`;
const keyRows = async (sql: Sql, k: string) => (await sql`select 1 from idempotency_keys where key = ${k}`).length;

describe("in the ledger", () => {
  const { db, api } = ledger;

  test("200: the charge authorized at its new total; ChargeAuthorizationIncreased at sequence 2; replayed byte for byte; a capture then takes the new total", async () => {
    const charge = await authorize(api, 5000);
    const k = key();
    const res = await increment(api, charge.id, 7500, k);
    expect(res.status).toBe(200);
    expect(res.headers.get("location")).toBe(`/charges/${charge.id}`);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ ...charge, amountCents: 7500 });
    const replay = await increment(api, charge.id, 7500, k);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.text()).toBe(text);
    const events = await eventsOf(db.sql, charge.id);
    expect(events.map((e) => [e.event_type, e.sequence])).toEqual([["ChargeCreated", 1], ["ChargeAuthorizationIncreased", 2]]);
    expect(JSON.parse(events[1]!.payload)).toEqual({ chargeId: charge.id, amountCents: 7500, previousAmountCents: 5000 });
    expect(await (await getCharge(api, charge.id)).json()).toMatchObject({ status: "authorized", amountCents: 7500 });
    const captured = await post(api, charge.id, "capture", key(), "{}");
    expect(await captured.json()).toMatchObject({ status: "succeeded", amountCents: 7500, capturedCents: 7500 });
  });

  test("refusals of their own type, nothing written and the key unused: not more than now, not authorized, unknown or another tenant's charge, a bad body, the key reused", async () => {
    const charge = await authorize(api, 5000);
    for (const amountCents of [5000, 4000]) {
      const k = key();
      expect(await expectProblem(await increment(api, charge.id, amountCents, k), 422, "increment-not-greater")).toMatchObject({ authorizedCents: 5000 });
      expect(await keyRows(db.sql, k)).toBe(0);
    }
    const atOnce = await newCharge(api, 900);
    expect((await expectProblem(await increment(api, atOnce, 1000), 422, "charge-not-incrementable")).chargeStatus).toBe("succeeded");
    await expectProblem(await increment(api, crypto.randomUUID(), 6000), 404, "not-found");
    await expectProblem(await increment(api, await newCharge(api, 900, "tenant-b"), 6000), 404, "not-found");
    await expectProblem(await post(api, charge.id, "increment-authorization", key(), "{}"), 400, "invalid-body");
    const k = key();
    expect((await increment(api, charge.id, 6000, k)).status).toBe(200);
    await expectProblem(await increment(api, charge.id, 6500, k), 422, "idempotency-key-reused");
    expect((await eventsOf(db.sql, charge.id)).map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeAuthorizationIncreased"]);
  });

  test("the client's method: charges.incrementAuthorization", async () => {
    const client = new ChargesClient({ baseUrl: "http://localhost", token: () => tokenFor("tenant-a"), fetch: (url, init) => api.fetch(new Request(url, init)) });
    const charge = await authorize(api, 1200);
    const { charge: raised } = await client.charges.incrementAuthorization(charge.id, { amountCents: 1500 }, { idempotencyKey: key() });
    expect(raised).toMatchObject({ id: charge.id, status: "authorized", amountCents: 1500 });
  });

  test("the event on MQTT: a relay publishes ChargeAuthorizationIncreased with its data", async () => {
    const { mqttUrl } = await services();
    const prefix = `test/${crypto.randomUUID()}/`;
    const collector = await collect(mqttUrl, prefix);
    const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName: "relay-test" });
    const broker = connectBroker(mqttUrl);
    try {
      await waitUntil(() => broker.connected, 5000, "broker connection");
      const relay = createRelay({ sql, broker, batchSize: 50, pollMs: 100, topicPrefix: prefix });
      void relay.run();
      const charge = await authorize(api, 2000);
      expect((await increment(api, charge.id, 2600)).status).toBe(200);
      const message = await collector.waitForMessage((m) => m.envelope?.type === "ChargeAuthorizationIncreased" && m.envelope.aggregateId === charge.id, 10_000, "the event");
      expect(message.topic).toBe(`${prefix}charges/ChargeAuthorizationIncreased`);
      expect(message.envelope).toMatchObject({ sequence: 2, data: { chargeId: charge.id, amountCents: 2600, previousAmountCents: 2000 } });
      await relay.stop();
    } finally {
      await broker.close();
      await sql.end({ timeout: 5 });
      await collector.close();
    }
  });
});

describe("through the processor", () => {
  const { db, sim, api } = processor;

  test("200: the PaymentIntent incremented to the new total, all of it capturable; the event; a capture then takes the new total", async () => {
    const charge = await authorize(api, 5000, "pm_card_visa");
    const res = await increment(api, charge.id, 8000);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ...charge, amountCents: 8000 });
    expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "requires_capture", amount: 8000, amountCapturable: 8000 })]);
    const events = await eventsOf(db.sql, charge.id);
    expect(events.map((e) => [e.event_type, e.sequence])).toEqual([["ChargeCreated", 1], ["ChargeAuthorizationIncreased", 2]]);
    expect(JSON.parse(events[1]!.payload)).toEqual({ chargeId: charge.id, amountCents: 8000, previousAmountCents: 5000 });
    expect(await (await post(api, charge.id, "capture", key(), "{}")).json()).toMatchObject({ status: "succeeded", capturedCents: 8000 });
  });

  for (const kind of ["500-after", "drop-after", "hang"] as const) {
    test(`an increment whose answer is lost (${kind}): 5xx, the charge updating, a capture refused; the same key resumes by reading the payment: incremented once, one event`, async () => {
      const charge = await authorize(api, 3000, "pm_card_visa");
      const k = key();
      sim.setFaults({ rules: [{ kind, op: "incrementAuthorization", times: 1 }] });
      const lost = await increment(api, charge.id, 4500, k);
      sim.clearFaults();
      await sim.settled();
      // Bun's fetch may resend a POST whose pooled connection closed, under the same processor key.
      if (!(kind === "drop-after" && lost.status === 200)) {
        expect([502, 503, 504]).toContain(lost.status);
        expect([...(await db.sql`select status, amount_cents from charges where id = ${charge.id}`)]).toEqual([{ status: "updating", amount_cents: 3000 }]);
        await expectProblem(await post(api, charge.id, "capture", key(), "{}"), 422, "charge-not-capturable");
        const again = await increment(api, charge.id, 4500, k);
        expect(again.status).toBe(200);
        expect(await again.json()).toMatchObject({ status: "authorized", amountCents: 4500 });
      }
      expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "requires_capture", amount: 4500, amountCapturable: 4500 })]);
      expect((await eventsOf(db.sql, charge.id)).map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeAuthorizationIncreased"]);
    });
  }

  test("an increment whose answer is lost and whose client never returns: the completer finishes it from the payment", async () => {
    const charge = await authorize(api, 2600, "pm_card_visa");
    const k = key();
    sim.setFaults({ rules: [{ kind: "500-after", op: "incrementAuthorization", times: 1 }] });
    expect((await increment(api, charge.id, 2900, k)).status).toBe(502);
    sim.clearFaults();
    await expireLease(db.sql, k);
    const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, 1500) });
    expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 1, finished: 1 });
    expect([...(await db.sql`select status, amount_cents from charges where id = ${charge.id}`)]).toEqual([{ status: "authorized", amount_cents: 2900 }]);
    const events = await eventsOf(db.sql, charge.id);
    expect(events.map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeAuthorizationIncreased"]);
    expect(JSON.parse(events[1]!.payload)).toEqual({ chargeId: charge.id, amountCents: 2900, previousAmountCents: 2600 });
    expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ amount: 2900 })]);
  });

  test("the same key while its first request waits on the processor: 409 request-in-flight; once that one timed out, the key resumes", async () => {
    const charge = await authorize(api, 3000, "pm_card_visa");
    const k = key();
    sim.setFaults({ rules: [{ kind: "hang", op: "incrementAuthorization", times: 1 }] });
    const first = increment(api, charge.id, 3500, k);
    await waitUntil(() => sim.requests().some((r) => r.op === "incrementAuthorization" && r.state === "hung"), 5000, "the increment hung at the processor");
    await expectProblem(await increment(api, charge.id, 3500, k), 409, "request-in-flight");
    expect((await first).status).toBe(504);
    sim.clearFaults();
    expect(await (await increment(api, charge.id, 3500, k)).json()).toMatchObject({ status: "authorized", amountCents: 3500 });
    expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ amount: 3500 })]);
  });

  test("a payment the processor will not increment (its creation did not ask): 422 increment-refused, stored and replayed; the charge authorized at its amount, no event", async () => {
    const stripe = stripeFor(sim);
    const intent = await stripe.paymentIntents.create({ amount: 5000, currency: "usd", payment_method: "pm_card_visa", confirm: true, capture_method: "manual", allowed_payment_method_types: ["card"] });
    const chargeId = crypto.randomUUID();
    await db.sql`insert into charges (id, tenant, amount_cents, currency, status, processor_payment_id) values (${chargeId}, 'tenant-a', 5000, 'usd', 'authorized', ${intent.id})`;
    const k = key();
    const res = await increment(api, chargeId, 6000, k);
    const text = await res.clone().text();
    expect(await expectProblem(res, 422, "increment-refused")).toMatchObject({ chargeId, failureCode: "incremental_authorization_not_available" });
    const replay = await increment(api, chargeId, 6000, k);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.text()).toBe(text);
    expect([...(await db.sql`select status, amount_cents from charges where id = ${chargeId}`)]).toEqual([{ status: "authorized", amount_cents: 5000 }]);
    expect(await eventsOf(db.sql, chargeId)).toHaveLength(0);
    // Still capturable at its amount.
    expect(await (await post(api, chargeId, "capture", key(), "{}")).json()).toMatchObject({ status: "succeeded", capturedCents: 5000 });
  });
});


// The simulator's faults, each the way it reaches a client (the real `stripe` package), and
// what the ledger says happened to the money; then the HTTP control surface.
import { afterAll, afterEach, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import Stripe from "stripe";
import { responseHeader, startProcessorSim, stripeFor, type ProcessorSim } from "../testkit/processor-sim.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(20_000);

// A client that gives up on a hung call this soon; the hang itself has no end.
const SHORT_TIMEOUT_MS = 300;

let sim: ProcessorSim;
let stripe: Stripe;

beforeAll(async () => {
  sim = await startProcessorSim();
  stripe = stripeFor(sim);
});
afterEach(async () => {
  sim.clearFaults();
  await sim.settled();
});
afterAll(() => sim.stop());

function payment(amount = 4900, paymentMethod = "pm_card_visa"): Stripe.PaymentIntentCreateParams {
  return { amount, currency: "usd", payment_method: paymentMethod, confirm: true, allowed_payment_method_types: ["card"] };
}

const withKey = (key: string) => sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key);
const callsWithKey = (key: string) => sim.requests().filter((request) => request.idempotencyKey === key);

async function failure(call: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  const error = await call.then(() => undefined, (caught: unknown) => caught);
  if (!(error instanceof Stripe.errors.StripeError)) throw new Error(`expected a StripeError, got ${String(error)}`);
  return error;
}

test("refuse: the client cannot connect (StripeConnectionError); once cleared, the same port answers", async () => {
  sim.setFaults({ rules: [{ kind: "refuse" }] });
  await sim.settled();
  const refused = await failure(stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() }));
  expect(refused).toBeInstanceOf(Stripe.errors.StripeConnectionError);
  const control = await fetch(`${sim.url}/_sim/ledger`).then(() => "answered", (error: unknown) => (error as { code?: string }).code);
  expect(control).toBe("ECONNREFUSED");
  sim.clearFaults();
  await sim.settled();
  expect((await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() })).status).toBe("succeeded");
});

test("refuse with refuseForMs, set over HTTP: the port comes back by itself", async () => {
  const put = await fetch(`${sim.url}/_sim/faults`, { method: "PUT", body: JSON.stringify({ rules: [{ kind: "refuse", refuseForMs: 200 }] }) });
  expect(put.status).toBe(204);
  await waitUntil(() => fetch(`${sim.url}/_sim/ledger`).then(() => false, () => true), 5000, "the refusal");
  await waitUntil(() => fetch(`${sim.url}/_sim/ledger`).then((response) => response.ok, () => false), 5000, "the port back");
  expect((await fetch(`${sim.url}/_sim/faults`).then((response) => response.json())) as unknown).toEqual({ rules: [] });
});

test("500-before: a 500 and no effect; the same key gets the same 500 back (Stripe keeps it)", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "500-before", op: "create", times: 1 }] });
  const first = await failure(stripe.paymentIntents.create(payment(), { idempotencyKey: key }));
  expect(first).toBeInstanceOf(Stripe.errors.StripeAPIError);
  expect(first).toMatchObject({ statusCode: 500, rawType: "api_error" });
  expect(withKey(key)).toHaveLength(0);
  const again = await failure(stripe.paymentIntents.create(payment(), { idempotencyKey: key }));
  expect(again).toMatchObject({ statusCode: 500, rawType: "api_error" });
  expect(responseHeader(again.headers, "idempotent-replayed")).toBe("true");
  expect(responseHeader(again.headers, "stripe-should-retry")).toBe("false");
  expect(withKey(key)).toHaveLength(0);
  expect((await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() })).status).toBe("succeeded");
});

test("500-after: the money moved, the answer is a 500, and the same key replays the 500 without charging again", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "500-after", op: "create" }] });
  const first = await failure(stripe.paymentIntents.create(payment(2500), { idempotencyKey: key }));
  expect(first).toMatchObject({ statusCode: 500, rawType: "api_error" });
  expect(withKey(key)).toMatchObject([{ status: "succeeded", confirmations: 1, amountCaptured: 2500 }]);
  const again = await failure(stripe.paymentIntents.create(payment(2500), { idempotencyKey: key }));
  expect(again.statusCode).toBe(500);
  expect(responseHeader(again.headers, "idempotent-replayed")).toBe("true");
  expect(withKey(key)).toMatchObject([{ confirmations: 1, amountCaptured: 2500 }]);
});

test("hang: the client times out, nothing happened, and the key is free again once the caller has gone", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "hang", op: "create", times: 1 }] });
  const timedOut = await failure(stripeFor(sim, { timeoutMs: SHORT_TIMEOUT_MS }).paymentIntents.create(payment(), { idempotencyKey: key }));
  expect(timedOut).toBeInstanceOf(Stripe.errors.StripeConnectionError);
  await waitUntil(() => callsWithKey(key).length > 0 && callsWithKey(key).every((call) => call.state === "abandoned"), 5000, "the hung call to end");
  expect(withKey(key)).toHaveLength(0);
  const after = await stripe.paymentIntents.create(payment(), { idempotencyKey: key });
  expect(after.status).toBe("succeeded");
  expect(responseHeader(after.lastResponse.headers, "idempotent-replayed")).toBeUndefined();
});

test("a client that times out during the latency: the money moved all the same, and the key replays the success", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ latencyMs: 1000 });
  const timedOut = await failure(stripeFor(sim, { timeoutMs: SHORT_TIMEOUT_MS }).paymentIntents.create(payment(1700), { idempotencyKey: key }));
  expect(timedOut).toBeInstanceOf(Stripe.errors.StripeConnectionError);
  await waitUntil(() => callsWithKey(key).some((call) => call.state === "abandoned"), 5000, "the call to finish without its caller");
  expect(withKey(key)).toMatchObject([{ status: "succeeded", confirmations: 1, amountCaptured: 1700 }]);
  sim.clearFaults();
  const retried = await stripe.paymentIntents.create(payment(1700), { idempotencyKey: key });
  expect(responseHeader(retried.lastResponse.headers, "idempotent-replayed")).toBe("true");
  expect(withKey(key)).toMatchObject([{ confirmations: 1 }]);
});

test("a key in flight: a second call with it is a 409 idempotency_key_in_use, at once", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "hang", op: "create", times: 1 }] });
  const caller = new AbortController();
  const held = failure(stripeFor(sim, { signal: caller.signal }).paymentIntents.create(payment(), { idempotencyKey: key }));
  await waitUntil(() => callsWithKey(key).some((call) => call.state === "hung"), 5000, "the first call to be held");
  const second = await failure(stripe.paymentIntents.create(payment(), { idempotencyKey: key }));
  expect(second).toMatchObject({ statusCode: 409, code: "idempotency_key_in_use", rawType: "invalid_request_error" });
  caller.abort();
  expect(await held).toBeInstanceOf(Stripe.errors.StripeConnectionError);
  expect(withKey(key)).toHaveLength(0);
});

test("drop-after: the client sees a connection error, the money moved once, and a retry with the key gets the stored success", async () => {
  const key = crypto.randomUUID();
  // Unlimited: the stripe package resends a POST once by itself when the connection closes.
  sim.setFaults({ rules: [{ kind: "drop-after", op: "create" }] });
  const dropped = await failure(stripe.paymentIntents.create(payment(3100), { idempotencyKey: key }));
  expect(dropped).toBeInstanceOf(Stripe.errors.StripeConnectionError);
  expect(withKey(key)).toMatchObject([{ status: "succeeded", confirmations: 1, amountCaptured: 3100 }]);
  const calls = callsWithKey(key);
  expect(calls.map((call) => call.state)).toEqual(calls.map(() => "dropped"));
  expect(calls.filter((call) => !call.replayed)).toHaveLength(1);
  sim.clearFaults();
  const retried = await stripe.paymentIntents.create(payment(3100), { idempotencyKey: key });
  expect(responseHeader(retried.lastResponse.headers, "idempotent-replayed")).toBe("true");
  expect(retried).toMatchObject({ id: withKey(key)[0]?.id ?? "", status: "succeeded" });
  expect(withKey(key)).toMatchObject([{ confirmations: 1 }]);
});

test("rules hit only their operation and payment method, and lift themselves after `times`", async () => {
  sim.setFaults({ rules: [{ kind: "500-before", probability: 0 }] });
  expect((await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() })).status).toBe("succeeded");
  sim.setFaults({ rules: [{ kind: "500-before", op: "create", paymentMethod: "pm_card_mastercard", times: 1 }] });
  expect((await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() })).status).toBe("succeeded");
  const hit = await failure(stripe.paymentIntents.create(payment(4900, "pm_card_mastercard"), { idempotencyKey: crypto.randomUUID() }));
  expect(hit.statusCode).toBe(500);
  expect((await stripe.paymentIntents.create(payment(4900, "pm_card_mastercard"), { idempotencyKey: crypto.randomUUID() })).status).toBe("succeeded");
  sim.setFaults({ rules: [{ kind: "500-after", op: "refund" }] });
  const intent = await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() });
  const refund = await failure(stripe.refunds.create({ payment_intent: intent.id, amount: 100 }, { idempotencyKey: crypto.randomUUID() }));
  expect(refund.statusCode).toBe(500);
  expect(sim.ledger().refunds.filter((entry) => entry.paymentIntent === intent.id)).toMatchObject([{ amount: 100, status: "succeeded" }]);
});

test("the control surface: the ledger, faults replaced and cleared, bad faults refused with a problem", async () => {
  const intent = await stripe.paymentIntents.create(payment(), { idempotencyKey: crypto.randomUUID() });
  const ledger = (await fetch(`${sim.url}/_sim/ledger`).then((response) => response.json())) as { paymentIntents: { id: string }[] };
  expect(ledger).toEqual(JSON.parse(JSON.stringify(sim.ledger())));
  expect(ledger.paymentIntents.map((entry) => entry.id)).toContain(intent.id);
  const faults = { latencyMs: 1, rules: [{ kind: "500-before", op: "confirm", times: 2 }] };
  expect((await fetch(`${sim.url}/_sim/faults`, { method: "PUT", body: JSON.stringify(faults) })).status).toBe(204);
  expect(await fetch(`${sim.url}/_sim/faults`).then((response) => response.json())).toEqual(faults);
  const bad = await fetch(`${sim.url}/_sim/faults`, { method: "PUT", body: JSON.stringify({ rules: [{ kind: "explode" }] }) });
  expect(bad.status).toBe(400);
  expect(bad.headers.get("content-type")).toBe("application/problem+json");
  expect(((await bad.json()) as { detail: string }).detail).toContain("rules[0]");
  expect(await fetch(`${sim.url}/_sim/faults`).then((response) => response.json())).toEqual(faults);
  expect((await fetch(`${sim.url}/_sim/faults`, { method: "DELETE" })).status).toBe(204);
  expect(await fetch(`${sim.url}/_sim/faults`).then((response) => response.json())).toEqual({ rules: [] });
  expect(() => sim.setFaults({ rules: [{ kind: "hang", times: 0 }] })).toThrow(TypeError);
});

test("500-after on a refund: the refund is made, the 500 is kept under its key, and the listing shows the refund with our metadata", async () => {
  const intent = await stripe.paymentIntents.create(payment(3000), { idempotencyKey: crypto.randomUUID() });
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "500-after", op: "refund" }] });
  const params = { payment_intent: intent.id, amount: 1200, metadata: { refund_id: key } };
  expect(await failure(stripe.refunds.create(params, { idempotencyKey: key }))).toMatchObject({ statusCode: 500, rawType: "api_error" });
  const again = await failure(stripe.refunds.create(params, { idempotencyKey: key }));
  expect([again.statusCode, responseHeader(again.headers, "idempotent-replayed")]).toEqual([500, "true"]);
  expect(sim.ledger().refunds.filter((refund) => refund.idempotencyKey === key).map((refund) => [refund.amount, refund.status])).toEqual([[1200, "succeeded"]]);
  const listed = await stripe.refunds.list({ payment_intent: intent.id });
  expect(listed.data.map((refund) => [refund.amount, refund.status, refund.metadata?.refund_id])).toEqual([[1200, "succeeded", key]]);
});

test("500-before on a refund: no refund, the 500 is kept under its key, and the listing is empty", async () => {
  const intent = await stripe.paymentIntents.create(payment(3000), { idempotencyKey: crypto.randomUUID() });
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "500-before", op: "refund" }] });
  const params = { payment_intent: intent.id, amount: 1200, metadata: { refund_id: key } };
  expect(await failure(stripe.refunds.create(params, { idempotencyKey: key }))).toMatchObject({ statusCode: 500, rawType: "api_error" });
  sim.clearFaults();
  const again = await failure(stripe.refunds.create(params, { idempotencyKey: key }));
  expect([again.statusCode, responseHeader(again.headers, "idempotent-replayed")]).toEqual([500, "true"]);
  expect(sim.ledger().refunds.filter((refund) => refund.paymentIntent === intent.id)).toHaveLength(0);
  expect((await stripe.refunds.list({ payment_intent: intent.id })).data).toEqual([]);
});

// The simulator on the wire and under concurrency: what a raw socket receives when an answer
// is dropped, the bytes of a replay, and the ledger's invariants when calls race (one
// confirmation per payment, refunds never above it, one payment per key).
import { afterAll, afterEach, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { connect } from "node:net";
import Stripe from "stripe";
import { SIM_KEY, startProcessorSim, stripeFor, type ProcessorSim } from "../testkit/processor-sim.ts";

setDefaultTimeout(20_000);

// Calls sent at once in the races below.
const RACERS = 5;

let sim: ProcessorSim;
let stripe: Stripe;

beforeAll(async () => {
  sim = await startProcessorSim();
  stripe = stripeFor(sim);
});
afterEach(() => sim.clearFaults());
afterAll(() => sim.stop());

const BODY = "amount=4900&currency=usd&payment_method=pm_card_visa&confirm=true&allowed_payment_method_types[0]=card&metadata[charge_id]=wire";

function rawRequest(key: string): string {
  return [
    "POST /v1/payment_intents HTTP/1.1",
    `Host: 127.0.0.1:${sim.port}`,
    `Authorization: Bearer ${SIM_KEY}`,
    "Content-Type: application/x-www-form-urlencoded",
    `Idempotency-Key: ${key}`,
    `Content-Length: ${Buffer.byteLength(BODY)}`,
    "Connection: close",
    "",
    BODY,
  ].join("\r\n");
}

/** Sends the bytes and answers every byte received until the server closes the connection. */
function exchange(request: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(sim.port, "127.0.0.1", () => socket.write(request));
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", (error: NodeJS.ErrnoException) => (error.code === "ECONNRESET" ? undefined : reject(error)));
    socket.on("close", () => resolve(Buffer.concat(chunks)));
  });
}

function split(response: Buffer): { head: string; body: string } {
  const text = response.toString("utf8");
  const at = text.indexOf("\r\n\r\n");
  return { head: text.slice(0, at), body: text.slice(at + 4) };
}

test("drop-after on the wire: not one byte comes back, yet the payment is made; the next call gets the stored bytes", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "drop-after", op: "create", times: 1 }] });
  expect((await exchange(rawRequest(key))).length).toBe(0);
  expect(sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key)).toMatchObject([{ status: "succeeded", confirmations: 1, metadata: { charge_id: "wire" } }]);
  const replay = split(await exchange(rawRequest(key)));
  expect(replay.head).toStartWith("HTTP/1.1 200");
  expect(replay.head.toLowerCase()).toContain("\r\nidempotent-replayed: true");
  expect(replay.head.toLowerCase()).toMatch(/\r\nrequest-id: req_\w+/);
  const again = split(await exchange(rawRequest(key)));
  expect(again.body).toBe(replay.body);
});

test("confirmations racing on one payment with different keys: exactly one moves money", async () => {
  const intent = await stripe.paymentIntents.create({ amount: 2000, currency: "usd", payment_method: "pm_card_visa", allowed_payment_method_types: ["card"] });
  const results = await Promise.allSettled(Array.from({ length: RACERS }, () => stripe.paymentIntents.confirm(intent.id, {}, { idempotencyKey: crypto.randomUUID() })));
  expect(results.filter((result) => result.status === "fulfilled")).toHaveLength(1);
  for (const result of results) {
    if (result.status === "rejected") expect(result.reason).toMatchObject({ statusCode: 400, code: "payment_intent_unexpected_state" });
  }
  expect(sim.ledger().paymentIntents.find((entry) => entry.id === intent.id)).toMatchObject({ confirmations: 1, amountCaptured: 2000 });
});

test("refunds racing on one payment: never more than its amount", async () => {
  const intent = await stripe.paymentIntents.create({ amount: 1000, currency: "usd", payment_method: "pm_card_visa", confirm: true, allowed_payment_method_types: ["card"] });
  const results = await Promise.allSettled(Array.from({ length: RACERS }, () => stripe.refunds.create({ payment_intent: intent.id, amount: 400 }, { idempotencyKey: crypto.randomUUID() })));
  expect(results.filter((result) => result.status === "fulfilled")).toHaveLength(2);
  const refunds = sim.ledger().refunds.filter((refund) => refund.paymentIntent === intent.id);
  expect(refunds.reduce((sum, refund) => sum + refund.amount, 0)).toBe(800);
  expect(sim.ledger().paymentIntents.find((entry) => entry.id === intent.id)?.amountRefunded).toBe(800);
});

test("one key sent by several callers at once: one payment; every other answer is the stored one or a 409", async () => {
  const key = crypto.randomUUID();
  sim.setFaults({ latencyMs: 100 });
  const params = { amount: 4900, currency: "usd", payment_method: "pm_card_visa", confirm: true, allowed_payment_method_types: ["card"] };
  const results = await Promise.allSettled(Array.from({ length: RACERS }, () => stripe.paymentIntents.create(params, { idempotencyKey: key })));
  const payments = sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key);
  expect(payments).toHaveLength(1);
  for (const result of results) {
    if (result.status === "fulfilled") expect(result.value.id).toBe(payments[0]?.id ?? "");
    else expect(result.reason).toMatchObject({ statusCode: 409, code: "idempotency_key_in_use" });
  }
  expect(results.some((result) => result.status === "fulfilled")).toBe(true);
});

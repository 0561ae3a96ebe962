// The payment-processor simulator as the real `stripe` package sees it: payments with the test
// cards, declines, Stripe's idempotency layer, refunds, and the ledger of money moved.
// Faults and the control surface: processor-sim-faults.test.ts.
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import Stripe from "stripe";
import { responseHeader, SIM_KEY, startProcessorSim, stripeFor, type ProcessorSim } from "../testkit/processor-sim.ts";
import { processorEnv } from "../dev/processor.ts";
import { spawnChild, spawnScript } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(20_000);

let sim: ProcessorSim;
let stripe: Stripe;

beforeAll(async () => {
  sim = await startProcessorSim();
  stripe = stripeFor(sim);
});
afterAll(() => sim.stop());

const CARD_ONLY = { allowed_payment_method_types: ["card"] };

function charge(paymentMethod: string, metadata: Record<string, string> = {}, amount = 4900): Stripe.PaymentIntentCreateParams {
  return { amount, currency: "usd", payment_method: paymentMethod, confirm: true, metadata, ...CARD_ONLY };
}

function entry(id: string) {
  const found = sim.ledger().paymentIntents.find((intent) => intent.id === id);
  if (!found) throw new Error(`${id} is not in the ledger`);
  return found;
}

async function failure(call: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  const error = await call.then(() => undefined, (caught: unknown) => caught);
  if (!(error instanceof Stripe.errors.StripeError)) throw new Error(`expected a StripeError, got ${String(error)}`);
  return error;
}

test("pm_card_visa: the payment succeeds and the ledger holds the money, the metadata and the key", async () => {
  const key = crypto.randomUUID();
  const intent = await stripe.paymentIntents.create(charge("pm_card_visa", { charge_id: "c-1" }), { idempotencyKey: key });
  expect(intent).toMatchObject({ object: "payment_intent", status: "succeeded", amount: 4900, amount_received: 4900, currency: "usd", livemode: false, metadata: { charge_id: "c-1" } });
  expect(intent.id).toMatch(/^pi_/);
  expect(intent.latest_charge).toMatch(/^ch_/);
  expect(intent.payment_method).toMatch(/^pm_/);
  expect(intent.lastResponse.requestId).toMatch(/^req_/);
  expect(entry(intent.id)).toEqual({ id: intent.id, amount: 4900, currency: "usd", status: "succeeded", paymentMethod: "pm_card_visa", metadata: { charge_id: "c-1" }, confirmations: 1, amountCaptured: 4900, amountCapturable: 0, amountRefunded: 0, incrementalAuthorization: null, idempotencyKey: key });
});

test("create then confirm: nothing moves before the confirmation; a second confirmation is refused and moves nothing", async () => {
  const created = await stripe.paymentIntents.create({ amount: 1500, currency: "EUR", payment_method: "pm_card_mastercard", ...CARD_ONLY });
  expect(created).toMatchObject({ status: "requires_confirmation", currency: "eur", amount_received: 0, latest_charge: null });
  expect(entry(created.id)).toMatchObject({ status: "requires_confirmation", confirmations: 0, amountCaptured: 0 });
  const confirmed = await stripe.paymentIntents.confirm(created.id, {}, { idempotencyKey: crypto.randomUUID() });
  expect(confirmed).toMatchObject({ id: created.id, status: "succeeded", amount_received: 1500 });
  const again = await failure(stripe.paymentIntents.confirm(created.id, {}, { idempotencyKey: crypto.randomUUID() }));
  expect(again).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
  expect(again).toMatchObject({ statusCode: 400, code: "payment_intent_unexpected_state" });
  expect(again.payment_intent?.status).toBe("succeeded");
  expect(entry(created.id)).toMatchObject({ status: "succeeded", paymentMethod: "pm_card_mastercard", confirmations: 1, amountCaptured: 1500 });
  const read = await stripe.paymentIntents.retrieve(created.id);
  expect(read).toMatchObject({ id: created.id, status: "succeeded", amount_received: 1500, latest_charge: confirmed.latest_charge });
});

for (const [method, declineCode] of [["pm_card_chargeDeclined", "generic_decline"], ["pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"]] as const) {
  test(`${method}: a 402 card_error with decline_code ${declineCode}, and no money in the ledger`, async () => {
    const declined = await failure(stripe.paymentIntents.create(charge(method), { idempotencyKey: crypto.randomUUID() }));
    expect(declined).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(declined).toMatchObject({ statusCode: 402, type: "StripeCardError", rawType: "card_error", code: "card_declined", decline_code: declineCode });
    const intent = declined.payment_intent;
    expect(intent).toMatchObject({ status: "requires_payment_method", amount_received: 0, last_payment_error: { code: "card_declined", decline_code: declineCode } });
    expect(entry(intent?.id ?? "")).toMatchObject({ status: "requires_payment_method", paymentMethod: method, confirmations: 0, amountCaptured: 0 });
  });
}

test("the same key and parameters again: the stored answer, Idempotent-Replayed: true, and one payment", async () => {
  const key = crypto.randomUUID();
  const first = await stripe.paymentIntents.create(charge("pm_card_visa", { charge_id: "c-2" }), { idempotencyKey: key });
  const second = await stripe.paymentIntents.create(charge("pm_card_visa", { charge_id: "c-2" }), { idempotencyKey: key });
  expect(responseHeader(first.lastResponse.headers, "idempotent-replayed")).toBeUndefined();
  expect(responseHeader(second.lastResponse.headers, "idempotent-replayed")).toBe("true");
  expect(responseHeader(second.lastResponse.headers, "original-request")).toBe(first.lastResponse.requestId);
  expect(second.lastResponse.requestId).not.toBe(first.lastResponse.requestId);
  expect(second).toEqual(first);
  expect(sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key)).toHaveLength(1);
  expect(entry(first.id).confirmations).toBe(1);
});

test("a decline is stored too: the replay is the same 402, and the card is not charged again", async () => {
  const key = crypto.randomUUID();
  const first = await failure(stripe.paymentIntents.create(charge("pm_card_chargeDeclined"), { idempotencyKey: key }));
  const second = await failure(stripe.paymentIntents.create(charge("pm_card_chargeDeclined"), { idempotencyKey: key }));
  expect(second).toMatchObject({ statusCode: 402, decline_code: "generic_decline" });
  expect(second.payment_intent?.id).toBe(first.payment_intent?.id ?? "");
  expect(responseHeader(second.headers, "idempotent-replayed")).toBe("true");
  expect(sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key)).toHaveLength(1);
});

test("the same key with other parameters, or on another endpoint: idempotency_error, and nothing new", async () => {
  const key = crypto.randomUUID();
  const first = await stripe.paymentIntents.create(charge("pm_card_visa", {}, 4900), { idempotencyKey: key });
  const other = await failure(stripe.paymentIntents.create(charge("pm_card_visa", {}, 5000), { idempotencyKey: key }));
  expect(other).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
  expect(other).toMatchObject({ statusCode: 400, rawType: "idempotency_error" });
  const elsewhere = await failure(stripe.refunds.create({ payment_intent: first.id }, { idempotencyKey: key }));
  expect(elsewhere).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
  expect(sim.ledger().paymentIntents.filter((intent) => intent.idempotencyKey === key)).toHaveLength(1);
  expect(sim.ledger().refunds.filter((refund) => refund.paymentIntent === first.id)).toHaveLength(0);
});

test("idempotency keys are per API key", async () => {
  const key = crypto.randomUUID();
  const mine = await stripe.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
  const theirs = await stripeFor(sim, { key: `${SIM_KEY}_other` }).paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
  expect(theirs.id).not.toBe(mine.id);
});

test("validation errors are not stored: the key works once the parameters are fixed", async () => {
  const key = crypto.randomUUID();
  const unknown = await failure(stripe.paymentIntents.create({ ...charge("pm_card_visa"), surprise: "x" } as Stripe.PaymentIntentCreateParams, { idempotencyKey: key }));
  expect(unknown).toMatchObject({ statusCode: 400, code: "parameter_unknown", param: "surprise" });
  const method = await failure(stripe.paymentIntents.create(charge("pm_card_nope"), { idempotencyKey: key }));
  expect(method).toMatchObject({ statusCode: 400, code: "resource_missing", param: "payment_method" });
  const fixed = await stripe.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
  expect(fixed.status).toBe("succeeded");
  expect(responseHeader(fixed.lastResponse.headers, "idempotent-replayed")).toBeUndefined();
});

test("a confirmation that could redirect needs a return_url, as on Stripe, unless redirects are off", async () => {
  const refused = await failure(stripe.paymentIntents.create({ amount: 4900, currency: "usd", payment_method: "pm_card_visa", confirm: true }));
  expect(refused).toMatchObject({ statusCode: 400, rawType: "invalid_request_error" });
  const noRedirects = await stripe.paymentIntents.create({ amount: 4900, currency: "usd", payment_method: "pm_card_visa", confirm: true, automatic_payment_methods: { enabled: true, allow_redirects: "never" } });
  expect(noRedirects.status).toBe("succeeded");
});

test("payment_method_types is refused on the package's API version (endive), as on Stripe; allowed_payment_method_types is its replacement", async () => {
  const params = { amount: 4900, currency: "usd", payment_method: "pm_card_visa", confirm: true, payment_method_types: ["card"] };
  const refused = await failure(stripe.paymentIntents.create(params as Stripe.PaymentIntentCreateParams));
  expect(refused).toMatchObject({ statusCode: 400, code: "payment_method_types_no_longer_supported", param: "payment_method_types" });
  const older = await fetch(`${sim.url}/v1/payment_intents`, {
    method: "POST",
    headers: { Authorization: `Bearer ${SIM_KEY}`, "Stripe-Version": "2025-09-30.clover" },
    body: "amount=4900&currency=usd&payment_method=pm_card_visa&confirm=true&payment_method_types[0]=card",
  });
  expect(older.status).toBe(200);
  const both = await failure(stripe.paymentIntents.create({ ...charge("pm_card_visa"), automatic_payment_methods: { enabled: true } }));
  expect(both).toMatchObject({ statusCode: 400, code: "parameters_exclusive" });
});

test("unknown objects are 404 resource_missing; a wrong or missing API key is 401", async () => {
  const missing = await failure(stripe.paymentIntents.retrieve("pi_doesnotexist"));
  expect(missing).toMatchObject({ statusCode: 404, code: "resource_missing" });
  const refund = await failure(stripe.refunds.retrieve("re_doesnotexist"));
  expect(refund).toMatchObject({ statusCode: 404, code: "resource_missing" });
  const live = await failure(stripeFor(sim, { key: "sk_live_nope" }).paymentIntents.retrieve("pi_x"));
  expect(live).toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
  const anonymous = await fetch(`${sim.url}/v1/payment_intents`, { method: "POST", body: "amount=100&currency=usd" });
  expect(anonymous.status).toBe(401);
  expect(((await anonymous.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  expect(anonymous.headers.get("request-id")).toMatch(/^req_/);
});

test("refunds: in parts up to the amount, then refused; the ledger's totals follow", async () => {
  const intent = await stripe.paymentIntents.create(charge("pm_card_visa", {}, 3000), { idempotencyKey: crypto.randomUUID() });
  const before = sim.ledger().totals;
  const part = await stripe.refunds.create({ payment_intent: intent.id, amount: 1000, metadata: { refund_id: "r-1" } }, { idempotencyKey: crypto.randomUUID() });
  expect(part).toMatchObject({ object: "refund", status: "succeeded", amount: 1000, payment_intent: intent.id, charge: intent.latest_charge, metadata: { refund_id: "r-1" } });
  expect(await stripe.refunds.retrieve(part.id)).toMatchObject({ id: part.id, amount: 1000 });
  const over = await failure(stripe.refunds.create({ payment_intent: intent.id, amount: 2001 }, { idempotencyKey: crypto.randomUUID() }));
  expect(over).toMatchObject({ statusCode: 400, rawType: "invalid_request_error", param: "amount" });
  const rest = await stripe.refunds.create({ payment_intent: intent.id }, { idempotencyKey: crypto.randomUUID() });
  expect(rest.amount).toBe(2000);
  const done = await failure(stripe.refunds.create({ payment_intent: intent.id, amount: 1 }, { idempotencyKey: crypto.randomUUID() }));
  expect(done).toMatchObject({ statusCode: 400, code: "charge_already_refunded" });
  expect(entry(intent.id)).toMatchObject({ amountCaptured: 3000, amountRefunded: 3000 });
  expect(sim.ledger().refunds.filter((refund) => refund.paymentIntent === intent.id).map((refund) => refund.amount)).toEqual([1000, 2000]);
  expect(sim.ledger().totals.refunded - before.refunded).toBe(3000);
});

test("a refund of a payment that did not succeed is refused", async () => {
  const pending = await stripe.paymentIntents.create({ amount: 900, currency: "usd", payment_method: "pm_card_visa", ...CARD_ONLY });
  const refused = await failure(stripe.refunds.create({ payment_intent: pending.id }));
  expect(refused).toMatchObject({ statusCode: 400, param: "payment_intent" });
  const unknown = await failure(stripe.refunds.create({ payment_intent: "pi_doesnotexist" }));
  expect(unknown).toMatchObject({ statusCode: 400, code: "resource_missing" });
  expect(sim.ledger().refunds.filter((refund) => refund.paymentIntent === pending.id)).toHaveLength(0);
});

test("every call is in the request log, with its key and what became of it", async () => {
  const key = crypto.randomUUID();
  await stripe.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
  const seen = await waitUntil(() => sim.requests().find((request) => request.idempotencyKey === key && request.state === "answered"));
  expect(seen).toMatchObject({ method: "POST", path: "/v1/payment_intents", op: "create", status: 200, replayed: false });
});

test("a key is kept 24 hours: after that, the same call is a new one", async () => {
  let now = Date.now();
  const timed = await startProcessorSim({ now: () => now });
  try {
    const client = stripeFor(timed);
    const key = crypto.randomUUID();
    const first = await client.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
    now += 24 * 3600 * 1000 - 1;
    const kept = await client.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
    expect(kept.id).toBe(first.id);
    now += 1;
    const renewed = await client.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: key });
    expect(renewed.id).not.toBe(first.id);
    expect(responseHeader(renewed.lastResponse.headers, "idempotent-replayed")).toBeUndefined();
  } finally {
    await timed.stop();
  }
});

test("the CLI prints one line with its URL, serves, and exits 0 on SIGTERM", async () => {
  const lines: string[] = [];
  const cli = spawnScript("dev/processor-sim/cli.ts", { stdout: (line) => void lines.push(line) });
  const url = await waitUntil(() => lines[0]?.match(/http:\/\/127\.0\.0\.1:\d+/)?.[0], 10_000, "the CLI's line");
  const ledger = await fetch(`${url}/_sim/ledger`).then((response) => response.json());
  expect(ledger).toEqual({ paymentIntents: [], refunds: [], totals: { captured: 0, refunded: 0 } });
  expect(await cli.stop()).toBe(0);
  expect(lines).toHaveLength(1);
  const bad = spawnChild(["bun", "dev/processor-sim/cli.ts", "--port", "x"], { stdout: "tail" });
  expect(await bad.done).toBe(1);
  expect(bad.output()).toBe('processor-sim: --port must be an integer from 0 to 65535, got "x"');
});

test("dev mode's processorEnv names a processor the stripe package reaches with the key it gives", async () => {
  const env = processorEnv(sim);
  expect(env.PAYMENT_PROCESSOR).toBe("stripe");
  const url = new URL(env.PAYMENT_PROCESSOR_URL ?? "");
  const client = new Stripe(env.PAYMENT_PROCESSOR_KEY ?? "", { host: url.hostname, port: Number(url.port), protocol: "http", maxNetworkRetries: 0, httpClient: Stripe.createFetchHttpClient() });
  const intent = await client.paymentIntents.create(charge("pm_card_visa"), { idempotencyKey: crypto.randomUUID() });
  expect(entry(intent.id).status).toBe("succeeded");
});

test("capture_method=manual: confirmed is requires_capture, nothing moves; one capture of up to amount_capturable moves that much, the rest released; a second is refused", async () => {
  const intent = await stripe.paymentIntents.create({ ...charge("pm_card_visa", { charge_id: "c-manual" }, 5000), capture_method: "manual" }, { idempotencyKey: crypto.randomUUID() });
  expect(intent).toMatchObject({ status: "requires_capture", amount_capturable: 5000, amount_received: 0, capture_method: "manual" });
  expect(entry(intent.id)).toMatchObject({ status: "requires_capture", amountCaptured: 0, amountCapturable: 5000 });
  // No refund of an authorization: nothing was captured.
  expect((await failure(stripe.refunds.create({ payment_intent: intent.id, amount: 100 }))).statusCode).toBe(400);
  expect((await failure(stripe.paymentIntents.capture(intent.id, { amount_to_capture: 5001 }))).statusCode).toBe(400);
  const key = crypto.randomUUID();
  const captured = await stripe.paymentIntents.capture(intent.id, { amount_to_capture: 3000 }, { idempotencyKey: key });
  expect(captured).toMatchObject({ status: "succeeded", amount_received: 3000, amount_capturable: 0 });
  // The same key again is the stored answer; another capture is refused, and nothing more moves.
  const replay = await stripe.paymentIntents.capture(intent.id, { amount_to_capture: 3000 }, { idempotencyKey: key });
  expect(responseHeader(replay.lastResponse.headers, "idempotent-replayed")).toBe("true");
  const again = await failure(stripe.paymentIntents.capture(intent.id, {}, { idempotencyKey: crypto.randomUUID() }));
  expect(again.code).toBe("payment_intent_unexpected_state");
  expect(entry(intent.id)).toMatchObject({ status: "succeeded", amountCaptured: 3000, amountCapturable: 0 });
  // Refunds apply to what was captured.
  expect((await failure(stripe.refunds.create({ payment_intent: intent.id, amount: 3001 }))).statusCode).toBe(400);
  expect((await stripe.refunds.create({ payment_intent: intent.id, amount: 3000 })).status).toBe("succeeded");
});

test("cancel: an authorization is released (canceled, nothing captured); a succeeded or canceled intent cannot be canceled or captured", async () => {
  const intent = await stripe.paymentIntents.create({ ...charge("pm_card_visa", {}, 2500), capture_method: "manual" });
  const canceled = await stripe.paymentIntents.cancel(intent.id, { cancellation_reason: "requested_by_customer" }, { idempotencyKey: crypto.randomUUID() });
  expect(canceled).toMatchObject({ status: "canceled", amount_capturable: 0, amount_received: 0, cancellation_reason: "requested_by_customer" });
  expect(canceled.canceled_at).toBeNumber();
  expect((await failure(stripe.paymentIntents.capture(intent.id))).code).toBe("payment_intent_unexpected_state");
  expect((await failure(stripe.paymentIntents.cancel(intent.id))).code).toBe("payment_intent_unexpected_state");
  const paid = await stripe.paymentIntents.create(charge("pm_card_visa"));
  expect((await failure(stripe.paymentIntents.cancel(paid.id))).code).toBe("payment_intent_unexpected_state");
  expect(entry(intent.id)).toMatchObject({ status: "canceled", amountCaptured: 0, amountCapturable: 0 });
});

test("increment_authorization: only a requires_capture intent whose creation asked for it, to a greater total; the answer is the intent with the new amount, all of it capturable", async () => {
  const asked = { capture_method: "manual" as const, payment_method_options: { card: { request_incremental_authorization: "if_available" as const } } };
  const intent = await stripe.paymentIntents.create({ ...charge("pm_card_visa", {}, 5000), ...asked });
  expect(intent.payment_method_options?.card?.request_incremental_authorization).toBe("if_available");
  expect((await failure(stripe.paymentIntents.incrementAuthorization(intent.id, { amount: 5000 }))).code).toBe("amount_too_small");
  const key = crypto.randomUUID();
  const raised = await stripe.paymentIntents.incrementAuthorization(intent.id, { amount: 7000 }, { idempotencyKey: key });
  expect(raised).toMatchObject({ id: intent.id, status: "requires_capture", amount: 7000, amount_capturable: 7000, amount_received: 0 });
  const replay = await stripe.paymentIntents.incrementAuthorization(intent.id, { amount: 7000 }, { idempotencyKey: key });
  expect(responseHeader(replay.lastResponse.headers, "idempotent-replayed")).toBe("true");
  expect(entry(intent.id)).toMatchObject({ amount: 7000, amountCapturable: 7000 });
  expect((await stripe.paymentIntents.capture(intent.id)).amount_received).toBe(7000);
  expect((await failure(stripe.paymentIntents.incrementAuthorization(intent.id, { amount: 8000 }))).code).toBe("payment_intent_unexpected_state");
  // Not asked at creation (or asked "never"): not eligible, and nothing changes.
  for (const options of [{}, { payment_method_options: { card: { request_incremental_authorization: "never" as const } } }]) {
    const plain = await stripe.paymentIntents.create({ ...charge("pm_card_visa", {}, 5000), capture_method: "manual", ...options });
    const refused = await failure(stripe.paymentIntents.incrementAuthorization(plain.id, { amount: 6000 }));
    expect([refused.statusCode, refused.code]).toEqual([400, "incremental_authorization_not_available"]);
    expect(entry(plain.id)).toMatchObject({ amount: 5000, amountCapturable: 5000 });
  }
  expect((await failure(stripe.paymentIntents.create({ ...charge("pm_card_visa"), payment_method_options: { card: { request_incremental_authorization: "sometimes" as never } } }))).statusCode).toBe(400);
});

test("refunds are listed as Stripe lists them: by PaymentIntent, newest first, a page at a time, with their metadata", async () => {
  const intent = await stripe.paymentIntents.create(charge("pm_card_visa", {}, 5000), { idempotencyKey: crypto.randomUUID() });
  const other = await stripe.paymentIntents.create(charge("pm_card_visa", {}, 5000), { idempotencyKey: crypto.randomUUID() });
  await stripe.refunds.create({ payment_intent: other.id, amount: 100, metadata: { refund_id: "elsewhere" } }, { idempotencyKey: crypto.randomUUID() });
  const made: string[] = [];
  for (let i = 0; i < 5; i++) made.push((await stripe.refunds.create({ payment_intent: intent.id, amount: 100 + i, metadata: { refund_id: `r-${i}` } }, { idempotencyKey: crypto.randomUUID() })).id);
  const first = await stripe.refunds.list({ payment_intent: intent.id, limit: 2 });
  expect(first).toMatchObject({ object: "list", has_more: true, url: "/v1/refunds" });
  expect(first.data.map((refund) => [refund.id, refund.metadata?.refund_id])).toEqual([[made[4]!, "r-4"], [made[3]!, "r-3"]]);
  const second = await stripe.refunds.list({ payment_intent: intent.id, limit: 2, starting_after: first.data[1]!.id });
  expect(second.data.map((refund) => refund.id)).toEqual([made[2]!, made[1]!]);
  const last = await stripe.refunds.list({ payment_intent: intent.id, limit: 2, starting_after: second.data[1]!.id });
  expect([last.data.map((refund) => refund.id), last.has_more]).toEqual([[made[0]!], false]);
  const back = await stripe.refunds.list({ payment_intent: intent.id, limit: 2, ending_before: made[1]! });
  expect(back.data.map((refund) => refund.id)).toEqual([made[3]!, made[2]!]);
  // The package's own auto-paging reads every page the same way.
  const all: string[] = [];
  for await (const refund of stripe.refunds.list({ payment_intent: intent.id, limit: 2 })) all.push(refund.id);
  expect(all).toEqual([...made].reverse());
  expect((await stripe.refunds.list({ payment_intent: intent.id })).data).toHaveLength(5);
  const wrong = await failure(stripe.refunds.list({ payment_intent: intent.id, limit: 101 }));
  expect(wrong).toMatchObject({ statusCode: 400, param: "limit" });
});

test("pm_card_refundFail: the payment succeeds; its refund is pending in the create's answer, then failed with its reason, and no money goes back", async () => {
  const intent = await stripe.paymentIntents.create(charge("pm_card_refundFail", {}, 3000), { idempotencyKey: crypto.randomUUID() });
  expect(intent.status).toBe("succeeded");
  const before = sim.ledger().totals.refunded;
  const refund = await stripe.refunds.create({ payment_intent: intent.id, amount: 1000 }, { idempotencyKey: crypto.randomUUID() });
  expect(refund.status).toBe("pending");
  expect(await stripe.refunds.retrieve(refund.id)).toMatchObject({ status: "failed", failure_reason: "expired_or_canceled_card" });
  expect((await stripe.refunds.list({ payment_intent: intent.id })).data.map((r) => r.status)).toEqual(["failed"]);
  expect(entry(intent.id)).toMatchObject({ amountCaptured: 3000, amountRefunded: 0 });
  expect(sim.ledger().totals.refunded).toBe(before);
});

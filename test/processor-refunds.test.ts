// POST /charges/:id/refunds through the payment processor (the simulator): the reservation in
// phase 1, the processor's refund under a key derived from the refund, phase 3's confirmation
// or release, and each ambiguous answer on the refund call. The simulator's ledger is the
// judge: at most one refund per refund key, and never more refunded than charged.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { resolveKey } from "../lib/ops/actions.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { refundCalls } from "../lib/charges/refund-steps.ts";
import { createProcessorClient } from "../lib/charges/processor.ts";
import { postCharge } from "../testkit/api.ts";
import { chargeWith, expireLease, keyState, processorEnv, processorTestContext, refundsOf } from "../testkit/processor.ts";
import { stripeFor } from "../testkit/processor-sim.ts";
import { getRefund, postRefund, refundBody } from "../testkit/refunds.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const TIMEOUT_MS = 1500;
const { db, sim, api, startApi } = await processorTestContext("processor_refunds", TIMEOUT_MS);

const key = () => crypto.randomUUID();
/** The listings of refunds the processor has seen so far. */
const listCalls = () => sim.requests().filter((r) => r.op === "listRefunds").length;

async function charged(amountCents: number, method = "pm_card_visa"): Promise<{ id: string; status: number }> {
  const res = await postCharge(api, chargeWith(amountCents, method), { key: key() });
  const body = (await res.json()) as { id?: string; chargeId?: string };
  return { id: String(body.id ?? body.chargeId), status: res.status };
}

async function chargeRow(id: string): Promise<{ refunded_cents: number; pending_refund_cents: number; last_sequence: number }> {
  const [row] = await db.sql<{ refunded_cents: number; pending_refund_cents: number; last_sequence: number }[]>`
    select refunded_cents, pending_refund_cents, last_sequence from charges where id = ${id}::uuid`;
  return row!;
}

async function refundIdOf(k: string): Promise<string> {
  const id = (await keyState(db.sql, k))?.resume?.refundId;
  if (typeof id !== "string") throw new Error("the key has no refund id");
  return id;
}

describe("the processor's final answers", () => {
  test("it refunds: 201; the processor's refund under the refund's key, for its amount; the reservation becomes the refunded total; ChargeRefunded is sequence 2", async () => {
    const charge = await charged(3000);
    const k = key();
    const res = await postRefund(api, charge.id, refundBody(1200), { key: k });
    expect(res.status).toBe(201);
    const refund = (await res.json()) as { id: string; chargeId: string; amountCents: number };
    expect(refund).toMatchObject({ chargeId: charge.id, amountCents: 1200 });
    expect(refundsOf(sim.ledger(), refund.id).map((r) => [r.amount, r.status, r.idempotencyKey])).toEqual([[1200, "succeeded", `${refund.id}:refund`]]);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 1200, pending_refund_cents: 0, last_sequence: 2 });
    const [event] = await db.sql<{ event_type: string; sequence: number; payload: string }[]>`
      select event_type, sequence, payload from outbox where aggregate_id = ${charge.id}::uuid and event_type = 'ChargeRefunded'`;
    expect(event).toMatchObject({ sequence: 2 });
    expect(JSON.parse(event!.payload)).toEqual({ chargeId: charge.id, refundId: refund.id, amountCents: 1200, refundedCents: 1200 });
    const [row] = await db.sql`select status, processor_refund_id from refunds where id = ${refund.id}::uuid`;
    expect(row).toEqual({ status: "succeeded", processor_refund_id: refundsOf(sim.ledger(), refund.id)[0]!.id });
    expect(await (await getRefund(api, charge.id, refund.id)).json()).toEqual({ ...refund, status: "succeeded" });
  });

  test("a charge that did not succeed is not refundable: 422 charge-not-refundable, nothing written, the processor untouched", async () => {
    const declined = await charged(800, "pm_card_chargeDeclined");
    expect(declined.status).toBe(402);
    const refundsBefore = sim.ledger().refunds.length;
    const res = await postRefund(api, declined.id, refundBody(100), { key: key() });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { type: string }).type).toBe("https://charges.example/problems/charge-not-refundable");
    expect(sim.ledger().refunds.length).toBe(refundsBefore);
    expect(await chargeRow(declined.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 0 });
  });

  test("a pending refund is reserved: while one is held at the processor, another beyond what is left is 422 refund-exceeds-charge", async () => {
    const charge = await charged(1000);
    sim.setFaults({ rules: [{ kind: "hang", op: "refund", times: 1 }] });
    const held = postRefund(api, charge.id, refundBody(700), { key: key() });
    await waitUntil(async () => (await chargeRow(charge.id)).pending_refund_cents === 700, 10_000, "the first refund reserved");
    const over = await postRefund(api, charge.id, refundBody(400), { key: key() });
    expect(over.status).toBe(422);
    expect(await over.json()).toMatchObject({ type: "https://charges.example/problems/refund-exceeds-charge", leftCents: 300 });
    expect((await held).status).toBe(504);
    const fits = await postRefund(api, charge.id, refundBody(300), { key: key() });
    expect(fits.status).toBe(201);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 300, pending_refund_cents: 700, last_sequence: 2 });
  });
});

const UNKNOWN_STATUS = { hang: 504, "drop-after": 503, refuse: 503 } as const;

describe("an unknown outcome on refund", () => {
  test.each(["hang", "drop-after", "refuse"] as const)(
    "%s: 5xx with Retry-After, the reservation held, the key STARTED; the same key then refunds once",
    async (kind) => {
      const charge = await charged(2000);
      const k = key();
      sim.setFaults({ rules: [{ kind, op: "refund", times: kind === "drop-after" ? 2 : 1 }] });
      if (kind === "refuse") await sim.settled();
      const first = await postRefund(api, charge.id, refundBody(500), { key: k });
      expect(first.status).toBe(UNKNOWN_STATUS[kind]);
      expect(first.headers.get("retry-after")).not.toBeNull();
      expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", recovery_point: "begun", response_status: null });
      expect(await chargeRow(charge.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 500 });
      expect(((await (await getRefund(api, charge.id, await refundIdOf(k))).json()) as { status: string }).status).toBe("pending");
      sim.clearFaults();
      await sim.settled();
      const second = await postRefund(api, charge.id, refundBody(500), { key: k });
      expect(second.status).toBe(201);
      const refundId = await refundIdOf(k);
      expect(refundsOf(sim.ledger(), refundId).map((r) => [r.amount, r.status])).toEqual([[500, "succeeded"]]);
      expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 500, pending_refund_cents: 0, last_sequence: 2 });
    },
  );

  test("a hang: the call ended without an answer, so the key keeps its attempt; the next try lists nothing of ours and sends the same key", async () => {
    const charge = await charged(2000);
    const k = key();
    sim.setFaults({ rules: [{ kind: "hang", op: "refund", times: 1 }] });
    expect((await postRefund(api, charge.id, refundBody(400), { key: k })).status).toBe(504);
    expect((await keyState(db.sql, k))?.resume?.refundAttempt).toBeUndefined();
    const refundId = await refundIdOf(k);
    await waitUntil(() => sim.requests().some((r) => r.idempotencyKey === `${refundId}:refund` && r.state === "abandoned"), 10_000, "the held call to end");
    const listsBefore = listCalls();
    expect((await postRefund(api, charge.id, refundBody(400), { key: k })).status).toBe(201);
    expect(listCalls()).toBe(listsBefore + 1);
    expect(refundsOf(sim.ledger(), refundId).map((r) => [r.amount, r.idempotencyKey])).toEqual([[400, `${refundId}:refund`]]);
  });

  // The processor keeps its 500 under the refund's key and answers it again for a day. The
  // 500 is its answer to a call it finished: the next try lists the payment's refunds, and
  // either finds ours (500 after the refund: its status decides) or knows that key made none
  // and sends the next attempt's. No operator.
  test.each([
    ["500-after", "the client's retry"],
    ["500-before", "the client's retry"],
    ["500-after", "the completer"],
    ["500-before", "the completer"],
  ] as const)("%s, resolved by %s: the listing decides, 201, exactly one processor refund, the charge's total and ChargeRefunded", async (kind, by) => {
    const charge = await charged(2000);
    const k = key();
    sim.setFaults({ rules: [{ kind, op: "refund", times: 1 }] });
    expect((await postRefund(api, charge.id, refundBody(600), { key: k })).status).toBe(502);
    sim.clearFaults();
    const refundId = await refundIdOf(k);
    expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", recovery_point: "begun", resume: expect.objectContaining({ refundAttempt: 1 }) });
    expect(refundsOf(sim.ledger(), refundId).length).toBe(kind === "500-after" ? 1 : 0);
    expect(await chargeRow(charge.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 600 });
    const listsBefore = listCalls();
    if (by === "the completer") {
      await expireLease(db.sql, k);
      const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, TIMEOUT_MS) });
      expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 1, finished: 1, parked: 0 });
      expect(await keyState(db.sql, k)).toMatchObject({ status: "COMPLETED", response_status: 201 });
    }
    const answer = await postRefund(api, charge.id, refundBody(600), { key: k });
    expect(answer.status).toBe(201);
    expect(answer.headers.get("idempotent-replayed")).toBe(by === "the completer" ? "true" : null);
    expect(listCalls()).toBe(listsBefore + 1);
    // After the effect, the refund the 500 hid (attempt 0's key); before it, one made under attempt 1's.
    const expectedKey = kind === "500-after" ? `${refundId}:refund` : `${refundId}:refund:1`;
    expect(refundsOf(sim.ledger(), refundId).map((r) => [r.amount, r.status, r.idempotencyKey])).toEqual([[600, "succeeded", expectedKey]]);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 600, pending_refund_cents: 0, last_sequence: 2 });
    const [row] = await db.sql`select status, processor_refund_id from refunds where id = ${refundId}::uuid`;
    expect(row).toEqual({ status: "succeeded", processor_refund_id: refundsOf(sim.ledger(), refundId)[0]!.id });
    const events = await db.sql<{ event_type: string }[]>`select event_type from outbox where aggregate_id = ${charge.id}::uuid order by sequence`;
    expect(events.map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeRefunded"]);
  });

  test.each([undefined, "500-after"] as const)("a refund the processor fails after it was created (%s): 422 refund-refused with its failure code, stored; the reservation released; one processor refund, failed", async (kind) => {
    const charge = await charged(2000, "pm_card_refundFail");
    const k = key();
    if (kind !== undefined) {
      sim.setFaults({ rules: [{ kind, op: "refund", times: 1 }] });
      expect((await postRefund(api, charge.id, refundBody(800), { key: k })).status).toBe(502);
      sim.clearFaults();
    }
    // Pending in the create's answer, then read (or, after the 500, found by the listing) failed.
    const res = await postRefund(api, charge.id, refundBody(800), { key: k });
    expect(res.status).toBe(422);
    expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/refund-refused", failureCode: "expired_or_canceled_card" });
    const refundId = await refundIdOf(k);
    expect(refundsOf(sim.ledger(), refundId).map((r) => [r.status, r.idempotencyKey])).toEqual([["failed", `${refundId}:refund`]]);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 0, pending_refund_cents: 0, last_sequence: 1 });
    const replay = await postRefund(api, charge.id, refundBody(800), { key: k });
    expect([replay.status, replay.headers.get("idempotent-replayed")]).toEqual([422, "true"]);
    expect(((await (await getRefund(api, charge.id, refundId)).json()) as { status: string }).status).toBe("failed");
  });

  test("the listing reads every page (100 a page, starting_after the last): ours found past the first, and none of ours is none", async () => {
    const stripe = stripeFor(sim);
    const intent = await stripe.paymentIntents.create({ amount: 50_000, currency: "usd", payment_method: "pm_card_visa", confirm: true, allowed_payment_method_types: ["card"] });
    const ours = crypto.randomUUID();
    await stripe.refunds.create({ payment_intent: intent.id, amount: 7, metadata: { refund_id: ours } });
    // 150 newer refunds of the same payment: ours is on the second page, newest first.
    for (let i = 0; i < 150; i++) await stripe.refunds.create({ payment_intent: intent.id, amount: 1, metadata: { refund_id: crypto.randomUUID() } });
    const calls = refundCalls(createProcessorClient(loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, TIMEOUT_MS) }).processor));
    const resume = { refundId: ours, chargeId: crypto.randomUUID(), amountCents: 7, createdAt: new Date().toISOString(), traceparent: null, paymentId: intent.id };
    const lists = listCalls();
    expect(await calls.find(resume)).toMatchObject({ kind: "ok", value: { status: "succeeded" } });
    expect(listCalls() - lists).toBe(2);
    expect(await calls.find({ ...resume, refundId: crypto.randomUUID() })).toEqual({ kind: "ok", value: undefined });
    expect(listCalls() - lists).toBe(4);
  });

  test("the listing races a create still in flight: the resume sends the same key (the processor answers 409, the attempt stays), and a later try finds the refund; one processor refund", async () => {
    const other = await startApi();
    const charge = await charged(2000);
    const k = key();
    // Every answer takes a while; the processor applies the refund before it answers.
    sim.setFaults({ latencyMs: 1000 });
    const old = postRefund(api, charge.id, refundBody(700), { key: k });
    await waitUntil(() => sim.requests().some((r) => r.op === "refund" && r.state === "in-flight"), 10_000, "the first holder's create at the processor");
    await expireLease(db.sql, k);
    sim.setFaults({ latencyMs: 0 });
    const taken = await postRefund(other, charge.id, refundBody(700), { key: k });
    const late = await old;
    const refundId = await refundIdOf(k);
    // Listed before the held create ran: nothing, the same key, 409 at the processor, 502 here
    // and the attempt unchanged. Listed after: the refund found, 201. The first holder's answer
    // came after it lost the lease: nothing written by it.
    expect([201, 502]).toContain(taken.status);
    expect(late.status).toBe(409);
    if (taken.status === 502) {
      expect((await keyState(db.sql, k))?.resume?.refundAttempt).toBeUndefined();
      expect((await postRefund(api, charge.id, refundBody(700), { key: k })).status).toBe(201);
    }
    expect(refundsOf(sim.ledger(), refundId).map((r) => [r.amount, r.idempotencyKey])).toEqual([[700, `${refundId}:refund`]]);
    expect(await chargeRow(charge.id)).toEqual({ refunded_cents: 700, pending_refund_cents: 0, last_sequence: 2 });
  });

  test("a processor that cannot be read: no create is sent again, every try is a 502, the key is parked only past the resolve window, and the operator's resolution matches the processor", async () => {
    const charge = await charged(2000);
    const k = key();
    sim.setFaults({ rules: [{ kind: "500-before", op: "refund", times: 1 }, { kind: "500-before", op: "listRefunds" }] });
    expect((await postRefund(api, charge.id, refundBody(600), { key: k })).status).toBe(502);
    const refundId = await refundIdOf(k);
    const creates = () => sim.requests().filter((r) => r.op === "refund" && r.idempotencyKey?.startsWith(refundId)).length;
    expect((await postRefund(api, charge.id, refundBody(600), { key: k })).status).toBe(502);
    const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, TIMEOUT_MS), PAYMENT_PROCESSOR_RESOLVE_WINDOW: "3600" });
    await expireLease(db.sql, k);
    expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 1, unknown: 1, parked: 0 });
    expect(creates()).toBe(1);
    expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", parked: false, resume: expect.objectContaining({ refundAttempt: 1 }) });
    // Past the window, still unreadable: parked.
    await db.sql`update idempotency_keys set created_at = now() - interval '2 hours', next_attempt_at = null where key = ${k}`;
    expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ parked: 1, claimed: 0 });
    sim.clearFaults();
    expect(refundsOf(sim.ledger(), refundId)).toEqual([]);
    const result = await resolveKey(db.sql, refundId, { kind: "refused", code: "not_at_processor" }, createProcessorClient(config.processor), 10_000);
    expect(result).toMatchObject({ resolved: true, outcome: "refused" });
    expect(await chargeRow(charge.id)).toMatchObject({ refunded_cents: 0, pending_refund_cents: 0 });
    const replay = await postRefund(api, charge.id, refundBody(600), { key: k });
    expect(replay.status).toBe(422);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(creates()).toBe(1);
  });
});

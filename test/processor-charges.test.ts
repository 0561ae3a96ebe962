// POST /charges through a payment processor (PAYMENT_PROCESSOR=stripe, the simulator): each
// row of SPEC's processor table, and each ambiguous answer of the processor on create and on
// confirm. What is asserted is what the user cares about: the answer, the rows, the event,
// and the simulator's ledger (at most one confirmed payment per charge, for its amount).
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { getCharge, postCharge } from "../testkit/api.ts";
import { chargeWith, confirmationsOf, keyState, paymentsOf, processorTestContext } from "../testkit/processor.ts";
import type { SimFaultKind, SimOperation } from "../dev/processor-sim/types.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

// Each call's bound: a hang answers 504 after it.
const TIMEOUT_MS = 1500;
const { db, sim, api } = await processorTestContext("processor_charges", TIMEOUT_MS);

const key = () => crypto.randomUUID();

async function chargeIdOf(k: string): Promise<string> {
  const state = await keyState(db.sql, k);
  const id = state?.resume?.chargeId;
  if (typeof id !== "string") throw new Error("the key has no charge id");
  return id;
}

async function outboxOf(chargeId: string): Promise<{ event_type: string; payload: string; sequence: number }[]> {
  return db.sql`select event_type, payload, sequence from outbox where aggregate_id = ${chargeId}::uuid`;
}

describe("the processor's final answers", () => {
  test("it confirms: 201 succeeded with the payment's id; one payment confirmed once; ChargeCreated with the currency; the key COMPLETED", async () => {
    const k = key();
    const res = await postCharge(api, chargeWith(4900, "pm_card_visa", "eur"), { key: k });
    expect(res.status).toBe(201);
    const charge = (await res.json()) as Record<string, unknown>;
    expect(charge).toMatchObject({ amountCents: 4900, currency: "eur", status: "succeeded" });
    expect(res.headers.get("location")).toBe(`/charges/${charge.id}`);
    const payments = paymentsOf(sim.ledger(), String(charge.id));
    expect(payments.map((p) => [p.id, p.amount, p.currency, p.status, p.confirmations])).toEqual([[String(charge.processorPaymentId), 4900, "eur", "succeeded", 1]]);
    const view = (await (await getCharge(api, String(charge.id))).json()) as Record<string, unknown>;
    expect(view).toMatchObject({ status: "succeeded", currency: "eur", processorPaymentId: charge.processorPaymentId, refundedCents: 0 });
    const events = await outboxOf(String(charge.id));
    expect(events.map((e) => [e.event_type, e.sequence, JSON.parse(e.payload)])).toEqual([["ChargeCreated", 1, { chargeId: charge.id, amountCents: 4900, currency: "eur" }]]);
    expect(await keyState(db.sql, k)).toMatchObject({ status: "COMPLETED", response_status: 201, lease_token: null });

    const replay = await postCharge(api, chargeWith(4900, "pm_card_visa", "eur"), { key: k });
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(JSON.parse(await replay.text())).toEqual(charge);
    expect(confirmationsOf(sim.ledger(), String(charge.id))).toBe(1);
  });

  test.each([
    ["pm_card_chargeDeclined", "generic_decline"],
    ["pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"],
  ])("it declines (%s): 402 card-declined with %s, stored and replayed byte for byte; the charge failed; ChargeFailed; no money moved", async (method, code) => {
    const k = key();
    const res = await postCharge(api, chargeWith(1200, method), { key: k });
    expect(res.status).toBe(402);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const text = await res.text();
    const problem = JSON.parse(text) as Record<string, unknown>;
    expect(problem).toMatchObject({ type: "https://charges.example/problems/card-declined", status: 402, declineCode: code, amountCents: 1200, currency: "usd" });
    const chargeId = String(problem.chargeId);
    const view = (await (await getCharge(api, chargeId)).json()) as Record<string, unknown>;
    expect(view).toMatchObject({ status: "failed", declineCode: code });
    const events = await outboxOf(chargeId);
    expect(events.map((e) => [e.event_type, e.sequence, JSON.parse(e.payload)])).toEqual([["ChargeFailed", 1, { chargeId, amountCents: 1200, currency: "usd", declineCode: code }]]);
    expect(confirmationsOf(sim.ledger(), chargeId)).toBe(0);

    const replay = await postCharge(api, chargeWith(1200, method), { key: k });
    expect(replay.status).toBe(402);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.text()).toBe(text);
    expect(paymentsOf(sim.ledger(), chargeId)).toHaveLength(1);
  });

  test("same key while the first request holds the lease (its confirm held at the processor) → 409 at once with Retry-After, nothing stored", async () => {
    const k = key();
    sim.setFaults({ rules: [{ kind: "hang", op: "confirm", times: 1 }] });
    const first = postCharge(api, chargeWith(610), { key: k });
    await waitUntil(() => sim.requests().some((r) => r.op === "confirm" && r.state === "hung"), 10_000, "the first request's confirm held");
    const second = await postCharge(api, chargeWith(610), { key: k });
    expect(second.status).toBe(409);
    expect(second.headers.get("retry-after")).toBe("1");
    expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", recovery_point: "created", lease_alive: true });
    expect((await first).status).toBe(504);
  });

  test("same key, another body → 422; no paymentMethod → 400; nothing reaches the processor", async () => {
    const k = key();
    expect((await postCharge(api, chargeWith(700), { key: k })).status).toBe(201);
    const before = sim.ledger().paymentIntents.length;
    expect((await postCharge(api, chargeWith(701), { key: k })).status).toBe(422);
    const missing = await postCharge(api, JSON.stringify({ amountCents: 700 }), { key: key() });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { errors: { field: string }[] }).errors.map((e) => e.field)).toEqual(["paymentMethod"]);
    expect(sim.ledger().paymentIntents.length).toBe(before);
  });
});

// The status an unknown outcome is answered with: the processor's 5xx, no connection, no answer in time.
const UNKNOWN_STATUS: Record<SimFaultKind, number> = { "500-before": 502, "500-after": 502, hang: 504, "drop-after": 503, refuse: 503 };

describe.each(["create", "confirm"] as const)("an unknown outcome on %s", (op: SimOperation) => {
  test.each(["500-before", "500-after", "hang", "drop-after", "refuse"] as const)(
    "%s: 5xx with Retry-After, nothing stored, the key STARTED at its recovery point; the same key then succeeds with one payment confirmed once",
    async (kind) => {
      const k = key();
      if (kind === "refuse" && op === "confirm") {
        // A refusal takes the whole port: reach the confirm's recovery point first (a 500 on it),
        // then the port refuses the resumed request's read of the payment.
        sim.setFaults({ rules: [{ kind: "500-before", op, times: 1 }] });
        expect((await postCharge(api, chargeWith(2500), { key: k })).status).toBe(502);
      }
      // The package resends once on a closed connection, which the processor answers from the
      // key: a drop of both is what leaves the outcome unknown.
      sim.setFaults({ rules: [{ kind, op, times: kind === "drop-after" ? 2 : 1 }] });
      if (kind === "refuse") await sim.settled();
      const first = await postCharge(api, chargeWith(2500), { key: k });
      expect(first.status).toBe(UNKNOWN_STATUS[kind]);
      expect(first.headers.get("retry-after")).not.toBeNull();
      const state = await keyState(db.sql, k);
      expect(state).toMatchObject({ status: "STARTED", response_status: null, lease_alive: false });
      // Create unknown: nothing recorded yet. Confirm unknown: the payment's id recorded before it.
      expect(state?.recovery_point).toBe(op === "create" ? "begun" : "created");
      const chargeId = await chargeIdOf(k);
      expect(((await (await getCharge(api, chargeId)).json()) as { status: string }).status).toBe("pending");
      expect(await outboxOf(chargeId)).toEqual([]);

      sim.clearFaults();
      await sim.settled();
      const second = await postCharge(api, chargeWith(2500), { key: k });
      expect(second.status).toBe(201);
      const charge = (await second.json()) as { id: string; status: string; processorPaymentId: string };
      expect(charge).toMatchObject({ id: chargeId, status: "succeeded" });
      const ledger = sim.ledger();
      // Money moved once, for the amount, on the payment the charge names.
      expect(confirmationsOf(ledger, chargeId)).toBe(1);
      expect(paymentsOf(ledger, chargeId).filter((p) => p.confirmations > 0).map((p) => [p.id, p.amountCaptured])).toEqual([[charge.processorPaymentId, 2500]]);
      expect((await outboxOf(chargeId)).map((e) => e.event_type)).toEqual(["ChargeCreated"]);
      expect(await keyState(db.sql, k)).toMatchObject({ status: "COMPLETED", response_status: 201 });
    },
  );
});

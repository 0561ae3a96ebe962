// POST /charges/:id/cancel in the ledger (PAYMENT_PROCESSOR=none): an authorized charge
// canceled, ChargeCanceled at its next sequence, the whole key contract, and the refusals.
import { expect, setDefaultTimeout, test } from "bun:test";
import { authHeaders } from "../testkit/auth.ts";
import { apiTestContext, getCharge, postCharge } from "../testkit/api.ts";
import { expectProblem, newCharge, postRefund, refundBody } from "../testkit/refunds.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("cancel");
const key = () => crypto.randomUUID();

async function authorize(amountCents: number): Promise<Record<string, unknown> & { id: string }> {
  const res = await postCharge(api, JSON.stringify({ amountCents, capture: "manual" }), { key: key() });
  expect(res.status).toBe(201);
  return (await res.json()) as Record<string, unknown> & { id: string };
}

async function post(chargeId: string, action: "cancel" | "capture", k: string, body = "{}"): Promise<Response> {
  const headers = { "content-type": "application/json", "idempotency-key": k, ...(await authHeaders("tenant-a")) };
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/${action}`, { method: "POST", headers, body }));
}

test("cancel: 200 the charge canceled; ChargeCanceled at sequence 2; replayed byte for byte; then neither capturable, cancelable nor refundable", async () => {
  const charge = await authorize(2500);
  const k = key();
  const res = await post(charge.id, "cancel", k);
  expect(res.status).toBe(200);
  expect(res.headers.get("location")).toBe(`/charges/${charge.id}`);
  const text = await res.text();
  expect(JSON.parse(text)).toEqual({ ...charge, status: "canceled" });
  const replay = await post(charge.id, "cancel", k);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
  expect(await replay.text()).toBe(text);
  const events = await db.sql<{ event_type: string; sequence: number; payload: string }[]>`select event_type, sequence, payload from outbox where aggregate_id = ${charge.id} order by sequence`;
  expect(events.map((e) => [e.event_type, e.sequence])).toEqual([["ChargeCreated", 1], ["ChargeCanceled", 2]]);
  expect(JSON.parse(events[1]!.payload)).toEqual({ chargeId: charge.id });
  expect(await (await getCharge(api, charge.id)).json()).toMatchObject({ status: "canceled", refundedCents: 0 });
  expect((await expectProblem(await post(charge.id, "capture", key()), 422, "charge-not-capturable")).chargeStatus).toBe("canceled");
  expect((await expectProblem(await post(charge.id, "cancel", key()), 422, "charge-not-cancelable")).chargeStatus).toBe("canceled");
  await expectProblem(await postRefund(api, charge.id, refundBody(100), { key: key() }), 422, "charge-not-refundable");
});

test("refusals, nothing written and the key unused: a captured charge, one captured at once, an unknown or another tenant's charge", async () => {
  const captured = await authorize(900);
  expect((await post(captured.id, "capture", key())).status).toBe(200);
  const k = key();
  await expectProblem(await post(captured.id, "cancel", k), 422, "charge-not-cancelable");
  expect([...(await db.sql`select 1 from idempotency_keys where key = ${k}`)]).toHaveLength(0);
  await expectProblem(await post(await newCharge(api, 900), "cancel", key()), 422, "charge-not-cancelable");
  await expectProblem(await post(crypto.randomUUID(), "cancel", key()), 404, "not-found");
  await expectProblem(await post(await newCharge(api, 900, "tenant-b"), "cancel", key()), 404, "not-found");
  await expectProblem(await post(captured.id, "cancel", key(), '{"reason":"x"}'), 400, "invalid-body");
});

test("a capture and a cancel of one charge at once: exactly one wins, the charge ends in its state with one event after ChargeCreated", async () => {
  for (let i = 0; i < 5; i++) {
    const charge = await authorize(1000);
    const [a, b] = await Promise.all([post(charge.id, "capture", key()), post(charge.id, "cancel", key())]);
    expect([a.status, b.status].filter((s) => s === 200)).toHaveLength(1);
    const events = await db.sql<{ event_type: string }[]>`select event_type from outbox where aggregate_id = ${charge.id} order by sequence`;
    const [row] = await db.sql<{ status: string }[]>`select status from charges where id = ${charge.id}`;
    expect(events.map((e) => e.event_type)).toEqual(["ChargeCreated", row!.status === "canceled" ? "ChargeCanceled" : "ChargeCaptured"]);
  }
});

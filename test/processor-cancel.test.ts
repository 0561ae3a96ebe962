// POST /charges/:id/cancel through the payment processor (the simulator): the PaymentIntent
// canceled once, whatever answers are lost; the charge canceled with ChargeCanceled.
import { expect, setDefaultTimeout, test } from "bun:test";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { authHeaders } from "../testkit/auth.ts";
import { postCharge } from "../testkit/api.ts";
import { expireLease, paymentsOf, processorEnv, processorTestContext } from "../testkit/processor.ts";
import { expectProblem } from "../testkit/refunds.ts";

setDefaultTimeout(30_000);

const TIMEOUT_MS = 1500;
const { db, sim, api } = await processorTestContext("processor_cancel", TIMEOUT_MS);
const key = () => crypto.randomUUID();

async function authorize(amountCents: number): Promise<Record<string, unknown> & { id: string }> {
  const res = await postCharge(api, JSON.stringify({ amountCents, paymentMethod: "pm_card_visa", capture: "manual" }), { key: key() });
  expect(res.status).toBe(201);
  return (await res.json()) as Record<string, unknown> & { id: string };
}

async function post(chargeId: string, action: "cancel" | "capture", k: string): Promise<Response> {
  const headers = { "content-type": "application/json", "idempotency-key": k, ...(await authHeaders("tenant-a")) };
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/${action}`, { method: "POST", headers, body: "{}" }));
}

const eventsOf = async (chargeId: string) => (await db.sql<{ event_type: string }[]>`select event_type from outbox where aggregate_id = ${chargeId} order by sequence`).map((e) => e.event_type);

test("cancel: 200 canceled; the PaymentIntent canceled, nothing captured; ChargeCanceled; a capture afterwards is 422", async () => {
  const charge = await authorize(2000);
  const res = await post(charge.id, "cancel", key());
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ ...charge, status: "canceled" });
  expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "canceled", amountCaptured: 0, amountCapturable: 0 })]);
  expect(await eventsOf(charge.id)).toEqual(["ChargeCreated", "ChargeCanceled"]);
  await expectProblem(await post(charge.id, "capture", key()), 422, "charge-not-capturable");
});

test("a cancel whose answer is lost (500-after): 502, the charge canceling; the same key resumes by reading the payment; the completer finishes another", async () => {
  for (const by of ["request", "completer"] as const) {
    const charge = await authorize(1800);
    const k = key();
    sim.setFaults({ rules: [{ kind: "500-after", op: "cancel", times: 1 }] });
    expect((await post(charge.id, "cancel", k)).status).toBe(502);
    sim.clearFaults();
    expect([...(await db.sql`select status from charges where id = ${charge.id}`)]).toEqual([{ status: "canceling" }]);
    await expireLease(db.sql, k);
    if (by === "request") expect((await post(charge.id, "cancel", k)).status).toBe(200);
    else {
      const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, TIMEOUT_MS) });
      expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 1, finished: 1 });
    }
    expect([...(await db.sql`select status from charges where id = ${charge.id}`)]).toEqual([{ status: "canceled" }]);
    expect(await eventsOf(charge.id)).toEqual(["ChargeCreated", "ChargeCanceled"]);
    expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "canceled", amountCaptured: 0 })]);
  }
});

// Authorize now, capture later through the payment processor (PAYMENT_PROCESSOR=stripe, the
// simulator): a manual charge's PaymentIntent is confirmed with capture_method=manual
// (requires_capture), and POST /charges/:id/capture captures it once, whatever answers are
// lost; what is asserted is the answer, the rows, the events and the simulator's ledger.
import { expect, setDefaultTimeout, test } from "bun:test";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { authHeaders } from "../testkit/auth.ts";
import { getCharge, postCharge } from "../testkit/api.ts";
import { expireLease, paymentsOf, processorEnv, processorTestContext } from "../testkit/processor.ts";
import { expectProblem } from "../testkit/refunds.ts";

setDefaultTimeout(30_000);

const TIMEOUT_MS = 1500;
const { db, sim, api } = await processorTestContext("processor_capture", TIMEOUT_MS);
const key = () => crypto.randomUUID();

async function authorize(amountCents: number): Promise<Record<string, unknown> & { id: string }> {
  const res = await postCharge(api, JSON.stringify({ amountCents, paymentMethod: "pm_card_visa", capture: "manual" }), { key: key() });
  expect(res.status).toBe(201);
  return (await res.json()) as Record<string, unknown> & { id: string };
}

async function postCapture(chargeId: string, body: string, k: string): Promise<Response> {
  const headers = { "content-type": "application/json", "idempotency-key": k, ...(await authHeaders("tenant-a")) };
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/capture`, { method: "POST", headers, body }));
}

const eventsOf = (chargeId: string) => db.sql<{ event_type: string; sequence: number; payload: string }[]>`select event_type, sequence, payload from outbox where aggregate_id = ${chargeId} order by sequence`;

test("a manual charge is authorized: its PaymentIntent confirmed with capture_method=manual, requires_capture, nothing captured, and asked for incremental authorization", async () => {
  const charge = await authorize(5000);
  expect(charge).toMatchObject({ status: "authorized", processorPaymentId: expect.stringMatching(/^pi_/) });
  expect(paymentsOf(sim.ledger(), charge.id)).toEqual([
    expect.objectContaining({ status: "requires_capture", amountCaptured: 0, amountCapturable: 5000, confirmations: 1, incrementalAuthorization: "if_available" }),
  ]);
  expect((await eventsOf(charge.id)).map((e) => JSON.parse(e.payload).status)).toEqual(["authorized"]);
});

test("capture: 200 succeeded with the processor's capturedCents; the payment captured once for that much; ChargeCaptured at sequence 2; replayed", async () => {
  const charge = await authorize(5000);
  const k = key();
  const res = await postCapture(charge.id, JSON.stringify({ amountCents: 4000 }), k);
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(JSON.parse(text)).toEqual({ ...charge, status: "succeeded", capturedCents: 4000 });
  expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "succeeded", amountCaptured: 4000, amountCapturable: 0 })]);
  expect((await eventsOf(charge.id)).map((e) => [e.event_type, e.sequence])).toEqual([["ChargeCreated", 1], ["ChargeCaptured", 2]]);
  const replay = await postCapture(charge.id, JSON.stringify({ amountCents: 4000 }), k);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
  expect(await replay.text()).toBe(text);
  expect(await (await getCharge(api, charge.id)).json()).toMatchObject({ status: "succeeded", capturedCents: 4000 });
});

for (const kind of ["500-after", "drop-after", "hang"] as const) {
  test(`a capture whose answer is lost (${kind}): 5xx, the charge capturing; the same key resumes by reading the payment: captured once, one ChargeCaptured`, async () => {
    const charge = await authorize(3000);
    const k = key();
    sim.setFaults({ rules: [{ kind, op: "capture", times: 1 }] });
    const lost = await postCapture(charge.id, "{}", k);
    sim.clearFaults();
    await sim.settled();
    // A dropped connection may be resent at once by Bun's fetch (one resend of a POST whose
    // pooled connection closed), under the same processor key: then the stored answer is read.
    if (!(kind === "drop-after" && lost.status === 200)) {
      expect([502, 503, 504]).toContain(lost.status);
      expect([...(await db.sql`select status from charges where id = ${charge.id}`)]).toEqual([{ status: "capturing" }]);
      // Another capture or key meanwhile is refused: the charge is not authorized any more.
      await expectProblem(await postCapture(charge.id, "{}", key()), 422, "charge-not-capturable");
      await expireLease(db.sql, k);
      const again = await postCapture(charge.id, "{}", k);
      expect(again.status).toBe(200);
      expect(await again.json()).toMatchObject({ status: "succeeded", capturedCents: 3000 });
    }
    expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ status: "succeeded", amountCaptured: 3000 })]);
    expect((await eventsOf(charge.id)).map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeCaptured"]);
  });
}

test("a capture whose answer is lost and whose client never returns: the completer finishes it from the payment", async () => {
  const charge = await authorize(2600);
  const k = key();
  sim.setFaults({ rules: [{ kind: "500-after", op: "capture", times: 1 }] });
  expect((await postCapture(charge.id, "{}", k)).status).toBe(502);
  sim.clearFaults();
  await expireLease(db.sql, k);
  const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim, TIMEOUT_MS) });
  expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 1, finished: 1 });
  expect([...(await db.sql`select status, captured_cents from charges where id = ${charge.id}`)]).toEqual([{ status: "succeeded", captured_cents: 2600 }]);
  expect((await eventsOf(charge.id)).map((e) => e.event_type)).toEqual(["ChargeCreated", "ChargeCaptured"]);
  expect(paymentsOf(sim.ledger(), charge.id)).toEqual([expect.objectContaining({ amountCaptured: 2600 })]);
});

test("a charge captured at once, or one the ledger authorized, is not capturable: 422, the processor untouched", async () => {
  const res = await postCharge(api, JSON.stringify({ amountCents: 900, paymentMethod: "pm_card_visa" }), { key: key() });
  const automatic = (await res.json()) as { id: string };
  await expectProblem(await postCapture(automatic.id, "{}", key()), 422, "charge-not-capturable");
  await db.sql`insert into charges (id, tenant, amount_cents, currency, status) values (${crypto.randomUUID()}, 'tenant-a', 500, 'usd', 'authorized')`;
  const [ledgerOnly] = await db.sql<{ id: string }[]>`select id from charges where processor_payment_id is null and status = 'authorized'`;
  await expectProblem(await postCapture(ledgerOnly!.id, "{}", key()), 422, "charge-not-capturable");
});

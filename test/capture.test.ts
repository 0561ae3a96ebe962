// Authorize now, capture later, in the ledger (PAYMENT_PROCESSOR=none): POST /charges with
// "capture": "manual" and POST /charges/:id/capture against real Postgres, asserting the rows,
// the events and the stored answers (docs/api.md, "Authorize now, capture later").
import { expect, setDefaultTimeout, test } from "bun:test";
import { authHeaders } from "../testkit/auth.ts";
import { apiTestContext, getCharge, postCharge } from "../testkit/api.ts";
import { expectProblem, ledger, newCharge, postRefund, refundBody } from "../testkit/refunds.ts";
import type { ApiProcess } from "../lib/api/start.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("capture");
const key = () => crypto.randomUUID();

async function authorize(amountCents: number): Promise<{ id: string; text: string; status: number }> {
  const res = await postCharge(api, JSON.stringify({ amountCents, capture: "manual" }), { key: key() });
  return { id: ((await res.clone().json()) as { id: string }).id, text: await res.text(), status: res.status };
}

async function postCapture(a: ApiProcess, chargeId: string, body: string, k: string): Promise<Response> {
  const headers = { "content-type": "application/json", "idempotency-key": k, ...(await authHeaders("tenant-a")) };
  return a.fetch(new Request(`http://localhost/charges/${chargeId}/capture`, { method: "POST", headers, body }));
}

test('"capture": "manual": 201 authorized; ChargeCreated says authorized; nothing is refundable yet', async () => {
  const charge = await authorize(5000);
  expect(charge.status).toBe(201);
  expect(JSON.parse(charge.text)).toMatchObject({ amountCents: 5000, status: "authorized" });
  const [row] = await db.sql`select status, captured_cents from charges where id = ${charge.id}`;
  expect(row).toEqual({ status: "authorized", captured_cents: null });
  const [event] = await db.sql<{ payload: string; sequence: number }[]>`select payload, sequence from outbox where aggregate_id = ${charge.id}`;
  expect(JSON.parse(event!.payload)).toEqual({ chargeId: charge.id, amountCents: 5000, currency: "usd", status: "authorized" });
  await expectProblem(await postRefund(api, charge.id, refundBody(100), { key: key() }), 422, "charge-not-refundable");
});

test("capture of part: 200, the charge succeeded with capturedCents, ChargeCaptured at sequence 2, stored and replayed byte for byte; refunds only of what was captured", async () => {
  const charge = await authorize(5000);
  const k = key();
  const res = await postCapture(api, charge.id, JSON.stringify({ amountCents: 3000 }), k);
  expect(res.status).toBe(200);
  expect(res.headers.get("location")).toBe(`/charges/${charge.id}`);
  const text = await res.text();
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(Object.keys(body)).toEqual(["id", "amountCents", "currency", "status", "capturedCents", "createdAt"]);
  expect(body).toEqual({ ...JSON.parse(charge.text), status: "succeeded", capturedCents: 3000 });
  const replay = await postCapture(api, charge.id, '{ "amountCents" : 3000 }', k);
  expect(replay.status).toBe(200);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
  expect(await replay.text()).toBe(text);
  expect([...(await db.sql`select status, captured_cents, last_sequence from charges where id = ${charge.id}`)]).toEqual([{ status: "succeeded", captured_cents: 3000, last_sequence: 2 }]);
  const events = await db.sql<{ event_type: string; sequence: number; payload: string }[]>`select event_type, sequence, payload from outbox where aggregate_id = ${charge.id} order by sequence`;
  expect(events.map((e) => [e.event_type, e.sequence])).toEqual([["ChargeCreated", 1], ["ChargeCaptured", 2]]);
  expect(JSON.parse(events[1]!.payload)).toEqual({ chargeId: charge.id, capturedCents: 3000 });
  expect(JSON.parse(await (await getCharge(api, charge.id)).text())).toMatchObject({ status: "succeeded", capturedCents: 3000, refundedCents: 0 });
  // Refunds apply to the 3000 captured, not the 5000 authorized.
  const over = await expectProblem(await postRefund(api, charge.id, refundBody(3001), { key: key() }), 422, "refund-exceeds-charge");
  expect(over.leftCents).toBe(3000);
  expect((await postRefund(api, charge.id, refundBody(3000), { key: key() })).status).toBe(201);
  expect(await ledger(db.sql, charge.id)).toMatchObject({ refundedCents: 3000, sequences: [1, 2, 3], eventTypes: ["ChargeCreated", "ChargeCaptured", "ChargeRefunded"] });
});

test("capture of all (no amount, body {}): capturedCents is the amount", async () => {
  const charge = await authorize(1200);
  const res = await postCapture(api, charge.id, "{}", key());
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ status: "succeeded", capturedCents: 1200 });
});

test("refusals of their own type, nothing written and the key unused: captured twice, captured at once, more than authorized, unknown or another tenant's charge", async () => {
  const charge = await authorize(1000);
  const more = key();
  const tooMuch = await expectProblem(await postCapture(api, charge.id, JSON.stringify({ amountCents: 1001 }), more), 422, "capture-exceeds-authorized");
  expect(tooMuch.authorizedCents).toBe(1000);
  // The key stayed unused: the same key with a fixed body captures.
  expect(await db.sql`select 1 from idempotency_keys where key = ${more}`).toHaveLength(0);
  expect((await postCapture(api, charge.id, JSON.stringify({ amountCents: 1000 }), more)).status).toBe(200);
  const twice = await expectProblem(await postCapture(api, charge.id, "{}", key()), 422, "charge-not-capturable");
  expect(twice.chargeStatus).toBe("succeeded");
  const automatic = await newCharge(api, 700);
  await expectProblem(await postCapture(api, automatic, "{}", key()), 422, "charge-not-capturable");
  await expectProblem(await postCapture(api, crypto.randomUUID(), "{}", key()), 404, "not-found");
  const theirs = await newCharge(api, 700, "tenant-b");
  await expectProblem(await postCapture(api, theirs, "{}", key()), 404, "not-found");
  expect([...(await db.sql`select count(*)::int as n from outbox where event_type = 'ChargeCaptured' and aggregate_id = ${charge.id}`)]).toEqual([{ n: 1 }]);
});

test("the key contract: the same key with another amount is a 422 idempotency-key-reused; a missing key a 400", async () => {
  const charge = await authorize(2000);
  const k = key();
  expect((await postCapture(api, charge.id, JSON.stringify({ amountCents: 500 }), k)).status).toBe(200);
  await expectProblem(await postCapture(api, charge.id, JSON.stringify({ amountCents: 600 }), k), 422, "idempotency-key-reused");
  const headers = { "content-type": "application/json", ...(await authHeaders("tenant-a")) };
  const noKey = await api.fetch(new Request(`http://localhost/charges/${charge.id}/capture`, { method: "POST", headers, body: "{}" }));
  await expectProblem(noKey, 400, "invalid-idempotency-key");
});

test("concurrent captures of one charge with different keys: exactly one captures, the others are 422 or 409", async () => {
  const charge = await authorize(4000);
  const answers = await Promise.all(Array.from({ length: 8 }, () => postCapture(api, charge.id, "{}", key())));
  const statuses = answers.map((r) => r.status);
  expect(statuses.filter((s) => s === 200)).toHaveLength(1);
  expect(statuses.every((s) => [200, 409, 422].includes(s))).toBe(true);
  expect([...(await db.sql`select count(*)::int as n from outbox where event_type = 'ChargeCaptured' and aggregate_id = ${charge.id}`)]).toEqual([{ n: 1 }]);
});

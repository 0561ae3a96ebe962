// POST /charges/:id/refunds against real Postgres: every row of the refunds table in docs/api.md and the
// text around it, asserting rows as well as responses; and the GETs that show refunds.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { apiTestContext, getCharge, postCharge, startTestApi, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { holdKey } from "../testkit/database.ts";
import { expectProblem, getRefund, ledger, newCharge, postRefund, REFUNDS_ENDPOINT, refundBody, written, type RefundBody } from "../testkit/refunds.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("refunds");

const key = () => crypto.randomUUID();
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The refund's outbox row. */
async function eventOf(refundId: string) {
  const rows = await db.sql<{ event_type: string; aggregate_type: string; aggregate_id: string; sequence: number; tenant: string; payload: string; published_at: Date | null }[]>`
    select event_type, aggregate_type, aggregate_id, sequence, tenant, payload, published_at
      from outbox where payload::json ->> 'refundId' = ${refundId}`;
  expect(rows.length).toBe(1);
  return rows[0]!;
}

describe("created", () => {
  test("a partial refund: 201, the exact body, Location, and key + refund + refunded total + ChargeRefunded event + stored response", async () => {
    const chargeId = await newCharge(api, 1000);
    const k = key();
    const res = await postRefund(api, chargeId, refundBody(300), { key: k });
    expect(res.status).toBe(201);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    const text = await res.text();
    const refund = JSON.parse(text) as RefundBody;
    expect(Object.keys(refund)).toEqual(["id", "chargeId", "amountCents", "createdAt"]);
    expect(refund).toEqual({ id: expect.stringMatching(UUID), chargeId, amountCents: 300, createdAt: expect.any(String) });
    expect(new Date(refund.createdAt).toISOString()).toBe(refund.createdAt);
    expect(Math.abs(Date.parse(refund.createdAt) - Date.now())).toBeLessThan(60_000);
    expect(res.headers.get("location")).toBe(`/charges/${chargeId}/refunds/${refund.id}`);

    const [row] = await db.sql`select charge_id, tenant, amount_cents, created_at from refunds where id = ${refund.id}`;
    expect(row).toMatchObject({ charge_id: chargeId, tenant: "tenant-a", amount_cents: 300 });
    expect((row!.created_at as Date).toISOString()).toBe(refund.createdAt);
    const [charge] = await db.sql`select amount_cents, refunded_cents, last_sequence from charges where id = ${chargeId}`;
    expect(charge).toMatchObject({ amount_cents: 1000, refunded_cents: 300, last_sequence: 2 });
    const event = await eventOf(refund.id);
    expect(event).toMatchObject({ event_type: "ChargeRefunded", aggregate_type: "charge", aggregate_id: chargeId, sequence: 2, tenant: "tenant-a", published_at: null });
    expect(JSON.parse(event.payload)).toEqual({ chargeId, refundId: refund.id, amountCents: 300, refundedCents: 300 });
    const [stored] = await db.sql`
      select endpoint, status, response_status, response_body from idempotency_keys where key = ${k}`;
    expect(stored).toEqual({ endpoint: REFUNDS_ENDPOINT, status: "COMPLETED", response_status: 201, response_body: text });
    // The charge's own creation is sequence 1 and untouched.
    expect(await ledger(db.sql, chargeId)).toEqual({
      amountCents: 1000,
      refundedCents: 300,
      refundsSum: 300,
      refunds: 1,
      sequences: [1, 2],
      eventTypes: ["ChargeCreated", "ChargeRefunded"],
    });
    expect(await written(db.sql)).toEqual({ charges: 1, outbox: 2, keys: 2, refunds: 1, refundedCents: 300, sequences: 2 });
  });

  test("refunds up to the full amount: each event numbered next (2, 3, 4) with the total after it; then nothing is left", async () => {
    const chargeId = await newCharge(api, 1000);
    const amounts = [100, 250, 650];
    const ids: string[] = [];
    for (const amount of amounts) {
      const res = await postRefund(api, chargeId, refundBody(amount), { key: key() });
      expect(res.status).toBe(201);
      ids.push(((await res.json()) as RefundBody).id);
    }
    let total = 0;
    for (const [i, id] of ids.entries()) {
      total += amounts[i]!;
      const event = await eventOf(id);
      expect(event.sequence).toBe(i + 2);
      expect(event.aggregate_type).toBe("charge");
      expect(JSON.parse(event.payload)).toEqual({ chargeId, refundId: id, amountCents: amounts[i], refundedCents: total });
    }
    expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 1000, refundsSum: 1000, refunds: 3, sequences: [1, 2, 3, 4] });
    const more = await postRefund(api, chargeId, refundBody(1), { key: key() });
    expect((await expectProblem(more, 422, "refund-exceeds-charge")).leftCents).toBe(0);
  });

  test("a single refund of the whole charge", async () => {
    const chargeId = await newCharge(api, 4900);
    const res = await postRefund(api, chargeId, refundBody(4900), { key: key() });
    expect(res.status).toBe(201);
    expect(await ledger(db.sql, chargeId)).toMatchObject({ amountCents: 4900, refundedCents: 4900, refunds: 1, sequences: [1, 2] });
  });
});

describe("the same key again", () => {
  test("same request: the stored body byte for byte, Location, Idempotent-Replayed: true, nothing written", async () => {
    const chargeId = await newCharge(api, 1000);
    const k = key();
    const first = await postRefund(api, chargeId, refundBody(300), { key: k });
    const firstText = await first.text();
    expect(first.status).toBe(201);
    const before = await written(db.sql);
    // Whitespace and member order do not make another request.
    for (const body of [refundBody(300), ' { "amountCents" : 300 } ']) {
      const replay = await postRefund(api, chargeId, body, { key: k });
      expect(replay.status).toBe(201);
      expect(replay.headers.get("idempotent-replayed")).toBe("true");
      expect(replay.headers.get("location")).toBe(first.headers.get("location"));
      expect(await replay.text()).toBe(firstText);
    }
    expect(await written(db.sql)).toEqual(before);
  });

  test("another amount → 422 idempotency-key-reused, nothing written", async () => {
    const chargeId = await newCharge(api, 1000);
    const k = key();
    expect((await postRefund(api, chargeId, refundBody(300), { key: k })).status).toBe(201);
    const before = await written(db.sql);
    const problem = await expectProblem(await postRefund(api, chargeId, refundBody(301), { key: k }), 422, "idempotency-key-reused");
    expect(problem.leftCents).toBeUndefined();
    expect(await written(db.sql)).toEqual(before);
  });

  test("another charge → 422 idempotency-key-reused (the charge id is in the fingerprint), nothing written", async () => {
    const a = await newCharge(api, 1000);
    const b = await newCharge(api, 1000);
    const k = key();
    expect((await postRefund(api, a, refundBody(300), { key: k })).status).toBe(201);
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, b, refundBody(300), { key: k }), 422, "idempotency-key-reused");
    expect(await written(db.sql)).toEqual(before);
    expect((await ledger(db.sql, b)).refundedCents).toBe(0);
  });

  test("a key used on POST /charges is another key on a refund: scoped by the route template", async () => {
    const k = key();
    const charge = await postCharge(api, refundBody(1000), { key: k });
    expect(charge.status).toBe(201);
    const chargeId = ((await charge.json()) as { id: string }).id;
    const refund = await postRefund(api, chargeId, refundBody(1000), { key: k });
    expect(refund.status).toBe(201);
    expect(refund.headers.get("idempotent-replayed")).toBeNull();
    expect(((await refund.json()) as RefundBody).chargeId).toBe(chargeId);
    // Two refunds of two charges with one key would be a 422; the endpoint is the template, not the path.
    const rows = await db.sql<{ endpoint: string }[]>`select endpoint from idempotency_keys where key = ${k} order by endpoint`;
    expect(rows.map((r) => r.endpoint)).toEqual(["POST /charges", REFUNDS_ENDPOINT]);
    // And each still replays its own.
    expect((await postCharge(api, refundBody(1000), { key: k })).headers.get("idempotent-replayed")).toBe("true");
    expect((await postRefund(api, chargeId, refundBody(1000), { key: k })).headers.get("idempotent-replayed")).toBe("true");
  });

  test("while the first is in flight → 409 at once with Retry-After; the first then commits one refund", async () => {
    const chargeId = await newCharge(api, 1000);
    const k = key();
    const hold = await holdKey(db.sql, k, REFUNDS_ENDPOINT);
    let firstDone = false;
    const first = postRefund(api, chargeId, refundBody(200), { key: k }).then((res) => ((firstDone = true), res));
    try {
      await waitForApiBlockedOnLock(db.sql);
      const second = await postRefund(api, chargeId, refundBody(200), { key: k });
      await expectProblem(second, 409, "request-in-flight");
      expect(second.headers.get("retry-after")).toBe("1");
      expect(firstDone).toBe(false);
    } finally {
      await hold.release();
    }
    expect((await first).status).toBe(201);
    expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 200, refunds: 1, sequences: [1, 2] });
  });
});

describe("the database slower than the request's bounds", () => {
  test("the charge row locked past API_LOCK_TIMEOUT_MS → 503 with Retry-After, nothing half-written; the key then refunds", async () => {
    const impatient = await startTestApi(db.url, { API_LOCK_TIMEOUT_MS: "200" });
    const holder = await db.sql.reserve();
    try {
      const chargeId = await newCharge(impatient, 1000);
      const k = key();
      const before = await written(db.sql);
      await holder`begin`;
      await holder`select id from charges where id = ${chargeId} for update`;
      const res = await postRefund(impatient, chargeId, refundBody(100), { key: k });
      await expectProblem(res, 503, "service-unavailable");
      expect(res.headers.get("retry-after")).toBe("1");
      await holder`rollback`;
      expect(await written(db.sql)).toEqual(before);
      const retry = await postRefund(impatient, chargeId, refundBody(100), { key: k });
      expect(retry.status).toBe(201);
      expect(retry.headers.get("idempotent-replayed")).toBeNull();
      expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 100, refunds: 1, sequences: [1, 2] });
    } finally {
      await holder`rollback`.catch(() => {});
      holder.release();
      await impatient.close();
    }
  });
});

describe("refused: nothing written, the key stays unused", () => {
  test("an unknown charge → 404 problem; the key then refunds a real charge", async () => {
    const k = key();
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, key(), refundBody(100), { key: k }), 404, "not-found");
    expect(await written(db.sql)).toEqual(before);
    const chargeId = await newCharge(api, 1000);
    const res = await postRefund(api, chargeId, refundBody(100), { key: k });
    expect(res.status).toBe(201);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
  });

  test("another tenant's charge → 404 problem, the charge untouched; the key then refunds the tenant's own charge", async () => {
    const theirs = await newCharge(api, 1000, "tenant-b");
    const k = key();
    const before = await written(db.sql);
    await expectProblem(await postRefund(api, theirs, refundBody(100), { key: k }), 404, "not-found");
    expect(await written(db.sql)).toEqual(before);
    expect((await ledger(db.sql, theirs)).refundedCents).toBe(0);
    const mine = await newCharge(api, 1000);
    expect((await postRefund(api, mine, refundBody(100), { key: k })).status).toBe(201);
    // tenant-b's own use of the same key string is its own key.
    expect((await postRefund(api, theirs, refundBody(100), { key: k, tenant: "tenant-b" })).status).toBe(201);
    const [keys] = await db.sql`select count(*)::int as n from idempotency_keys where key = ${k}`;
    expect(keys?.n).toBe(2);
  });

  test("more than is left → 422 refund-exceeds-charge with leftCents, not the key-reuse type; the key is usable afterwards", async () => {
    const chargeId = await newCharge(api, 1000);
    expect((await postRefund(api, chargeId, refundBody(600), { key: key() })).status).toBe(201);
    const k = key();
    const before = await written(db.sql);
    const problem = await expectProblem(await postRefund(api, chargeId, refundBody(401), { key: k }), 422, "refund-exceeds-charge");
    expect(problem.leftCents).toBe(400);
    expect(problem.title).not.toBe("Idempotency-Key reused with another request");
    expect(await written(db.sql)).toEqual(before);
    const [stored] = await db.sql`select count(*)::int as n from idempotency_keys where key = ${k}`;
    expect(stored?.n).toBe(0);
    // The same key, the same body: refused again (nothing was stored to replay).
    expect((await expectProblem(await postRefund(api, chargeId, refundBody(401), { key: k }), 422, "refund-exceeds-charge")).leftCents).toBe(400);
    // The same key with what is left: a refund.
    const ok = await postRefund(api, chargeId, refundBody(400), { key: k });
    expect(ok.status).toBe(201);
    expect(ok.headers.get("idempotent-replayed")).toBeNull();
    expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 1000, refundsSum: 1000, refunds: 2, sequences: [1, 2, 3] });
  });

  test("a refund larger than the whole charge → 422 refund-exceeds-charge with leftCents = the amount", async () => {
    const chargeId = await newCharge(api, 1000);
    const before = await written(db.sql);
    expect((await expectProblem(await postRefund(api, chargeId, refundBody(2_147_483_647), { key: key() }), 422, "refund-exceeds-charge")).leftCents).toBe(1000);
    expect(await written(db.sql)).toEqual(before);
  });
});

describe("reading refunds", () => {
  test("GET /charges/:id shows refundedCents, the total so far", async () => {
    const chargeId = await newCharge(api, 1000);
    const view = async () => (await (await getCharge(api, chargeId)).json()) as Record<string, unknown>;
    expect(await view()).toMatchObject({ id: chargeId, amountCents: 1000, refundedCents: 0 });
    expect((await postRefund(api, chargeId, refundBody(150), { key: key() })).status).toBe(201);
    expect((await postRefund(api, chargeId, refundBody(50), { key: key() })).status).toBe(201);
    const after = await view();
    expect(Object.keys(after).sort()).toEqual(["amountCents", "createdAt", "currency", "id", "refundedCents", "status"]);
    expect(after).toMatchObject({ id: chargeId, amountCents: 1000, refundedCents: 200 });
  });

  test("GET /charges/:id/refunds/:refundId returns the refund; 404 when unknown, under another charge, or another tenant's; 400 when not a UUID", async () => {
    const chargeId = await newCharge(api, 1000);
    const other = await newCharge(api, 1000);
    const created = (await (await postRefund(api, chargeId, refundBody(300), { key: key() })).json()) as RefundBody;
    const got = await getRefund(api, chargeId, created.id);
    expect(got.status).toBe(200);
    expect(got.headers.get("content-type")).toStartWith("application/json");
    // The refund as created, and its state now (always succeeded without a payment processor).
    expect(await got.json()).toEqual({ ...created, status: "succeeded" });

    await expectProblem(await getRefund(api, chargeId, key()), 404, "not-found");
    await expectProblem(await getRefund(api, other, created.id), 404, "not-found");
    await expectProblem(await getRefund(api, chargeId, created.id, "tenant-b"), 404, "not-found");
    await expectProblem(await getRefund(api, chargeId, "not-a-uuid"), 400, "invalid-id");
    await expectProblem(await getRefund(api, "not-a-uuid", created.id), 400, "invalid-id");
  });
});

test("an upper-case UUID in the path is the same charge and the same fingerprint", async () => {
  const chargeId = await newCharge(api, 1000);
  const k = key();
  const first = await postRefund(api, chargeId.toUpperCase(), refundBody(100), { key: k });
  expect(first.status).toBe(201);
  const text = await first.text();
  const refund = JSON.parse(text) as RefundBody;
  expect(refund.chargeId).toBe(chargeId);
  expect(first.headers.get("location")).toBe(`/charges/${chargeId}/refunds/${refund.id}`);
  const replay = await postRefund(api, chargeId, refundBody(100), { key: k });
  expect(replay.status).toBe(201);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
  expect(await replay.text()).toBe(text);
  const got = await getRefund(api, chargeId.toUpperCase(), refund.id.toUpperCase());
  expect(got.status).toBe(200);
  expect(await got.json()).toEqual({ ...refund, status: "succeeded" });
  expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 100, refunds: 1, sequences: [1, 2] });
});

describe("metrics", () => {
  const telemetry = startTelemetry("charges-api-refunds-test", undefined, false);
  const metered = startTestApi(db.url, {}, { metrics: telemetry.scrape, meter: telemetry.provider.getMeter("charges") });
  afterAll(async () => {
    await (await metered).close();
    await telemetry.shutdown();
  });

  function sample(text: string, labels: Record<string, string>): number | undefined {
    const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
    for (const line of text.split("\n")) {
      if (!line.startsWith("idempotency_requests_total{")) continue;
      const have = line.slice(line.indexOf("{") + 1, line.lastIndexOf("}")).split(",");
      if (have.length === wanted.length && wanted.every((w) => have.includes(w))) return Number(line.split(" ").pop());
    }
    return undefined;
  }

  test("idempotency_requests_total counts the refund endpoint under its route template", async () => {
    const m = await metered;
    const chargeId = await newCharge(m, 1000);
    const [a, b] = [key(), key()];
    expect((await postRefund(m, chargeId, refundBody(100), { key: a })).status).toBe(201); // created
    expect((await postRefund(m, chargeId, refundBody(100), { key: b })).status).toBe(201); // created
    expect((await postRefund(m, chargeId, refundBody(100), { key: a })).status).toBe(201); // replayed
    expect((await postRefund(m, chargeId, refundBody(200), { key: a })).status).toBe(422); // payload_conflict
    expect((await postRefund(m, chargeId, refundBody(100), { key: null })).status).toBe(400); // no key: not counted
    // The text is rendered at most once per API_METRICS_MAX_AGE_MS: the counts appear within
    // that age. They only grow, so wait until they reach what is expected, then assert exactly.
    const expected = { created: 2, replayed: 1, payload_conflict: 1 };
    const text = await waitUntil(async () => {
      const t = await (await m.fetch(new Request("http://localhost/metrics"))).text();
      return Object.entries(expected).every(([outcome, n]) => (sample(t, { endpoint: REFUNDS_ENDPOINT, outcome }) ?? 0) >= n) && t;
    }, 5000, "the refunds' outcomes counted");
    const at = (outcome: string) => sample(text, { endpoint: REFUNDS_ENDPOINT, outcome });
    expect(at("created")).toBe(2);
    expect(at("replayed")).toBe(1);
    expect(at("payload_conflict")).toBe(1);
    // The charge created above counts under its own endpoint, never a concrete path.
    expect(sample(text, { endpoint: "POST /charges", outcome: "created" })).toBe(1);
    expect(text).not.toContain(`endpoint="POST /charges/${chargeId}`);
  });
});

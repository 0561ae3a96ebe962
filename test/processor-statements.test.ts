// The statements of the processor mode as the API sends them: every one within the pool gate
// (a statement after a processor call included), and phase 3 as one statement for many keys,
// each written only by its own lease holder.
import { afterAll, beforeAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { ApiProcess } from "../lib/api/start.ts";
import { API_POOL_NAME } from "../lib/api/services.ts";
import { compile, runFinish, type HeldKey } from "../lib/idempotency/skeleton.ts";
import { endpointOf, type Resume } from "../lib/idempotency/model.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { createRefund } from "../lib/charges/refunds.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { postCharge, TEST_API_APP } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { valueOf } from "../testkit/prometheus.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { chargeWith, keyState, startProcessorApi } from "../testkit/processor.ts";
import { freshDatabase, type TestDatabase } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

// A pool this small is filled by a few requests.
const POOL_SIZE = 2;
const REQUESTS = 4;
let db: TestDatabase;
let sim: ProcessorSim;
let api: ApiProcess;
const telemetry = startTelemetry("charges-api-statements-test", undefined, false);

beforeAll(async () => {
  db = await freshDatabase("processor_statements");
  sim = await startProcessorSim();
  // Bounds long enough that nothing times out while the test holds the outbox locked.
  const bounds = { API_POOL_SIZE: String(POOL_SIZE), API_LOCK_TIMEOUT_MS: "4000", API_POOL_WAIT_MS: "4000" };
  api = await startProcessorApi(db.url, sim, bounds, { metrics: telemetry.scrape, meter: telemetry.provider.getMeter("charges") });
});
afterAll(async () => {
  await api.close();
  await sim.stop();
  await db.drop();
  await telemetry.shutdown();
});
beforeEach(async () => {
  sim.clearFaults();
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

/**
 * The first /metrics text for which `ready` holds. The text is rendered at most once per
 * API_METRICS_MAX_AGE_MS: what just happened shows within that age.
 */
async function scrapeUntil(ready: (text: string) => boolean, what: string): Promise<string> {
  return waitUntil(async () => ((text) => ready(text) && text)(await scrape()), 5000, what);
}

async function scrape(): Promise<string> {
  return (await api.fetch(new Request("http://localhost/metrics"))).text();
}

function busySlots(text: string): number {
  return valueOf(text, "db_client_connections_busy", { db_client_connection_pool_name: API_POOL_NAME }) ?? Number.NaN;
}

async function apiBackends(): Promise<{ connections: number; working: number }> {
  const [row] = await db.sql<{ connections: number; working: number }[]>`
    select count(*)::int as connections, (count(*) filter (where state <> 'idle'))::int as working
      from pg_stat_activity where datname = current_database() and application_name = ${TEST_API_APP}`;
  return row!;
}

test("phase 3, after the processor's calls, holds a slot of the pool gate: busy counts every API backend at work, and never more than the pool", async () => {
  // The outbox locked: every phase 3 waits on it in Postgres, on a pooled connection.
  const holder = await db.sql.reserve();
  await holder`begin`;
  await holder`lock table outbox in exclusive mode`;
  let answers: Response[] = [];
  try {
    const sent = Promise.all(Array.from({ length: REQUESTS }, () => postCharge(api, chargeWith(1500), { key: crypto.randomUUID() })));
    void sent.then((r) => (answers = r));
    await waitUntil(async () => (await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = current_database() and application_name = ${TEST_API_APP} and wait_event_type = 'Lock'`)[0]!.n > 0 || undefined, 10_000, "a phase 3 to wait on the outbox");
    // The text is at most API_METRICS_MAX_AGE_MS old: wait for one that shows the statements
    // admitted (no slot was busy before them) and every backend then at work in a slot.
    const { busy, backends } = await waitUntil(async () => {
      const busy = busySlots(await scrape());
      const backends = await apiBackends();
      return busy > 0 && busy >= backends.working && { busy, backends };
    }, 3000, "the busy slots to cover every API backend at work");
    expect(backends.connections).toBeLessThanOrEqual(POOL_SIZE);
    expect(backends.working).toBeGreaterThan(0);
    // The backends at work (blocked in phase 3) are statements the gate admitted.
    expect(busy).toBeGreaterThanOrEqual(backends.working);
    expect(busy).toBeLessThanOrEqual(POOL_SIZE);
  } finally {
    await holder`rollback`;
    holder.release();
  }
  await waitUntil(() => answers.length === REQUESTS || undefined, 20_000, "every answer");
  expect(answers.map((r) => r.status)).toEqual(Array(REQUESTS).fill(201));
  const [row] = await db.sql<{ succeeded: number; events: number }[]>`
    select (select count(*) from charges where status = 'succeeded')::int as succeeded, (select count(*) from outbox)::int as events`;
  expect(row).toEqual({ succeeded: REQUESTS, events: REQUESTS });
  // Each charge's three statements (phase 1, the payment's id recorded, phase 3) counted, some in
  // batches. A text from the hold shows slots busy: wait for one rendered since every slot was
  // given back, with the totals (which only grow) at the requests', then assert them exactly.
  const settled = (t: string) => busySlots(t) === 0 && (valueOf(t, "api_charge_statement_requests_total", {}) ?? 0) >= 3 * REQUESTS;
  const text = await scrapeUntil(settled, "every slot free and every statement counted");
  expect(busySlots(text)).toBe(0);
  const rows = valueOf(text, "api_charge_statement_requests_total", {}) ?? 0;
  const statements = valueOf(text, "api_charge_statements_total", {}) ?? 0;
  expect(rows).toBe(3 * REQUESTS);
  expect(statements).toBeGreaterThan(0);
  expect(statements).toBeLessThan(rows);
});

/** A STARTED key at `created` with its pending charge, held by `token`, written as phase 1 and a recorded step leave it. */
async function startedCharge(token: string): Promise<{ held: HeldKey; resume: Resume }> {
  const chargeId = crypto.randomUUID();
  const key = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  const resume: Resume = { chargeId, amountCents: 2500, currency: "usd", paymentMethod: "pm_card_visa", createdAt, traceparent: null, paymentId: `pi_${chargeId.slice(0, 8)}` };
  await db.sql`insert into charges (id, tenant, amount_cents, currency, status, created_at) values (${chargeId}::uuid, ${TEST_TENANT}, 2500, 'usd', 'pending', ${createdAt}::timestamptz)`;
  await db.sql`
    insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_token, lease_until, resume)
    values (${TEST_TENANT}, ${key}, ${endpointOf(createCharge)}, 'h', 'STARTED', now() + interval '1 day', 'created', ${token}::uuid, now() + interval '1 minute', ${db.sql.json(resume)})`;
  return { held: { tenant: TEST_TENANT, key, endpoint: endpointOf(createCharge), token, point: "created", resume }, resume };
}

test("phase 3 of two keys in one statement, one lease taken over: only the holder's key, charge and event are written", async () => {
  const a = await startedCharge(crypto.randomUUID());
  const b = await startedCharge(crypto.randomUUID());
  // b's lease was taken over by another holder while this one called the processor.
  const taker = crypto.randomUUID();
  await db.sql`update idempotency_keys set lease_token = ${taker}::uuid where key = ${b.held.key}`;
  const [ra, rb] = await runFinish(db.sql, compile(db.sql, createCharge, "finish"), [
    { key: a.held, outcome: "succeeded", resume: a.resume },
    { key: b.held, outcome: "refused", resume: { ...b.resume, declineCode: "generic_decline" } },
  ]);
  expect(ra?.status).toBe(201);
  expect(JSON.parse(ra!.body)).toMatchObject({ id: a.resume.chargeId, status: "succeeded", createdAt: a.resume.createdAt });
  expect(rb).toBeUndefined();
  const ka = await keyState(db.sql, a.held.key);
  const kb = await keyState(db.sql, b.held.key);
  expect(ka).toMatchObject({ status: "COMPLETED", response_status: 201, response_body: ra!.body, lease_token: null });
  expect(kb).toMatchObject({ status: "STARTED", recovery_point: "created", lease_token: taker, response_body: null });
  const charges = await db.sql<{ id: string; status: string }[]>`select id, status from charges order by status`;
  expect(Object.fromEntries(charges.map((c) => [c.id, c.status]))).toEqual({ [a.resume.chargeId as string]: "succeeded", [b.resume.chargeId as string]: "pending" });
  const events = await db.sql<{ aggregate_id: string; event_type: string; tenant: string }[]>`select aggregate_id, event_type, tenant from outbox`;
  expect([...events]).toEqual([{ aggregate_id: a.resume.chargeId as string, event_type: "ChargeCreated", tenant: TEST_TENANT }]);
});

test("phase 3 of two refunds in one statement: one refunded (sequence after the charge's last, refunded total in the event), one released", async () => {
  const rows = [];
  for (const amount of [4000, 3000]) {
    const chargeId = crypto.randomUUID();
    const refundId = crypto.randomUUID();
    const key = crypto.randomUUID();
    const token = crypto.randomUUID();
    const createdAt = new Date().toISOString();
    await db.sql`insert into charges (id, tenant, amount_cents, currency, status, processor_payment_id, refunded_cents, pending_refund_cents, last_sequence)
                 values (${chargeId}::uuid, ${TEST_TENANT}, 10000, 'usd', 'succeeded', 'pi_x', 1000, ${amount}, 2)`;
    await db.sql`insert into refunds (id, charge_id, tenant, amount_cents, created_at, status) values (${refundId}::uuid, ${chargeId}::uuid, ${TEST_TENANT}, ${amount}, ${createdAt}::timestamptz, 'pending')`;
    const resume: Resume = { refundId, chargeId, amountCents: amount, createdAt, paymentId: "pi_x", traceparent: null, processorRefundId: `re_${amount}` };
    await db.sql`
      insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_token, lease_until, resume)
      values (${TEST_TENANT}, ${key}, ${endpointOf(createRefund)}, 'h', 'STARTED', now() + interval '1 day', 'begun', ${token}::uuid, now() + interval '1 minute', ${db.sql.json(resume)})`;
    rows.push({ key: { tenant: TEST_TENANT, key, endpoint: endpointOf(createRefund), token, point: "begun", resume }, resume, chargeId, refundId });
  }
  const [ok, refused] = rows as [(typeof rows)[0], (typeof rows)[0]];
  const [rOk, rRefused] = await runFinish(db.sql, compile(db.sql, createRefund, "finish"), [
    { key: ok.key, outcome: "succeeded", resume: ok.resume },
    { key: refused.key, outcome: "refused", resume: { ...refused.resume, failureCode: "charge_disputed" } },
  ]);
  expect(rOk?.status).toBe(201);
  expect(JSON.parse(rOk!.body)).toEqual({ id: ok.refundId, chargeId: ok.chargeId, amountCents: 4000, createdAt: ok.resume.createdAt });
  expect(rRefused?.status).toBe(422);
  const charges = await db.sql<{ id: string; refunded_cents: number; pending_refund_cents: number; last_sequence: number }[]>`
    select id, refunded_cents, pending_refund_cents, last_sequence from charges`;
  const byId = Object.fromEntries(charges.map((c) => [c.id, c]));
  expect(byId[ok.chargeId]).toMatchObject({ refunded_cents: 5000, pending_refund_cents: 0, last_sequence: 3 });
  expect(byId[refused.chargeId]).toMatchObject({ refunded_cents: 1000, pending_refund_cents: 0, last_sequence: 2 });
  const refunds = await db.sql<{ id: string; status: string; failure_code: string | null }[]>`select id, status, failure_code from refunds`;
  expect(Object.fromEntries(refunds.map((r) => [r.id, [r.status, r.failure_code]]))).toEqual({ [ok.refundId]: ["succeeded", null], [refused.refundId]: ["failed", "charge_disputed"] });
  const events = await db.sql<{ aggregate_id: string; sequence: number; payload: string }[]>`select aggregate_id, sequence, payload from outbox where event_type = 'ChargeRefunded'`;
  expect(events.map((e) => ({ ...e, payload: JSON.parse(e.payload) }))).toEqual([
    { aggregate_id: ok.chargeId, sequence: 3, payload: { chargeId: ok.chargeId, refundId: ok.refundId, amountCents: 4000, refundedCents: 5000 } },
  ]);
});

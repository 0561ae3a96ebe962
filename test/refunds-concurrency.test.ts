// Refunds of one charge never add up to more than its amount, whatever their concurrency:
// group commit in one API (requests queued behind held statements, then sent in batches),
// two real `bun api.ts` processes on one database with every key sent to both, and a client
// resending a refund whose first answer it never read. Checked on the rows: the refunds, the
// charge's refunded total, and its events' sequences (exactly 1..n).
import { afterAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/platform/db.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { startTestApi, TEST_API_APP } from "../testkit/api.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { holdKey } from "../testkit/database.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { ledger, newCharge, oneTo, postRefund, REFUNDS_ENDPOINT, refundBody, type RefundBody } from "../testkit/refunds.ts";
import { freshDatabase } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(90_000);

const EXCEEDS = "https://charges.example/problems/refund-exceeds-charge";

const db = await freshDatabase("refunds_race");
const telemetry = startTelemetry("charges-api-refunds-race", undefined, false);
// The defaults: API_CHARGE_STATEMENTS 2 under a pool of 32, so queued requests go in batches.
const api = await startTestApi(db.url, {}, { metrics: telemetry.scrape, meter: telemetry.provider.getMeter("charges") });
afterAll(async () => {
  await api.close();
  await telemetry.shutdown();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate refunds, outbox, idempotency_keys, charges`;
});

/** The group commit's figures on the API's /metrics (rendered at most once per API_METRICS_MAX_AGE_MS). */
async function groupCommit(): Promise<{ statements: number; requests: number; queued: number }> {
  const text = await (await api.fetch(new Request("http://localhost/metrics"))).text();
  const bare = (name: string) => ((line) => (line === undefined ? 0 : Number(line.split(" ").pop())))(text.split("\n").find((l) => l.startsWith(`${name} `)));
  return { statements: bare("api_charge_statements_total"), requests: bare("api_charge_statement_requests_total"), queued: bare("api_charge_requests_queued") };
}

/** Backends of the in-process API waiting on a lock now. */
async function blockedBackends(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and application_name = ${TEST_API_APP} and wait_event_type = 'Lock'`;
  return row!.n;
}

interface Sent {
  readonly chargeId: string;
  readonly key: string;
  readonly amountCents: number;
  readonly status: number;
  readonly replayed: boolean;
  readonly body: string;
}

/** A random amount in [min, max]. */
const amount = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));

/**
 * The invariants on the rows after a race over `charges`: per charge, the refunds sum to its
 * refunded total, never past its amount, and its events are numbered exactly 1..n; every
 * 201 names a refund row of its amount (one per key whatever the sends); every 422 is
 * refund-exceeds-charge and justified (more than what is left even now), with no key row.
 */
async function checkInvariants(sql: Sql, charges: readonly { id: string; amountCents: number }[], sent: readonly Sent[]): Promise<void> {
  expect(sent.filter((s) => s.status >= 500)).toEqual([]);
  for (const charge of charges) {
    const l = await ledger(sql, charge.id);
    expect(l.amountCents).toBe(charge.amountCents);
    expect(l.refundsSum).toBe(l.refundedCents);
    expect(l.refundedCents).toBeLessThanOrEqual(l.amountCents);
    expect(l.sequences).toEqual(oneTo(1 + l.refunds));
    expect(l.eventTypes).toEqual(["ChargeCreated", ...Array<string>(l.refunds).fill("ChargeRefunded")]);
    const left = l.amountCents - l.refundedCents;
    for (const s of sent.filter((x) => x.chargeId === charge.id && x.status === 422)) {
      const problem = JSON.parse(s.body) as { type: string; leftCents: number };
      expect(problem.type).toBe(EXCEEDS);
      // What is left only ever shrinks: a justified refusal is for more than is left now too.
      expect(s.amountCents).toBeGreaterThan(left);
      expect(problem.leftCents).toBeGreaterThanOrEqual(left);
    }
  }
  const byKey = new Map<string, Sent[]>();
  for (const s of sent) byKey.set(s.key, [...(byKey.get(s.key) ?? []), s]);
  const refunds = await sql<{ id: string; charge_id: string; amount_cents: number; key: string | null }[]>`
    select r.id, r.charge_id, r.amount_cents,
           (select k.key from idempotency_keys k where k.endpoint = ${REFUNDS_ENDPOINT} and (k.response_body::json ->> 'id')::uuid = r.id) as key
      from refunds r`;
  // Every refund has exactly one key, and no key names two refunds.
  expect(refunds.filter((r) => r.key === null)).toEqual([]);
  expect(new Set(refunds.map((r) => r.key)).size).toBe(refunds.length);
  const refundOf = new Map(refunds.map((r) => [r.key!, r]));
  for (const [k, answers] of byKey) {
    const created = answers.filter((a) => a.status === 201);
    const row = refundOf.get(k);
    if (created.length > 0) {
      // Every 201 for a key is one refund, byte for byte, and it is in the table.
      expect(new Set(created.map((a) => a.body)).size).toBe(1);
      expect(created.filter((a) => !a.replayed).length).toBeLessThanOrEqual(1);
      const body = JSON.parse(created[0]!.body) as RefundBody;
      expect(row).toBeDefined();
      expect(row).toMatchObject({ id: body.id, charge_id: answers[0]!.chargeId, amount_cents: answers[0]!.amountCents });
    }
    // A key refused is not stored: a 422 and a 201 for one key never both happen.
    if (answers.some((a) => a.status === 422)) {
      expect(created).toEqual([]);
      expect(row).toBeUndefined();
    }
  }
  const [keys] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where endpoint = ${REFUNDS_ENDPOINT}`;
  expect(keys!.n).toBe(refunds.length);
}

async function sendRefund(target: ApiProcess, chargeId: string, key: string, amountCents: number): Promise<Sent> {
  const res = await postRefund(target, chargeId, refundBody(amountCents), { key });
  return { chargeId, key, amountCents, status: res.status, replayed: res.headers.get("idempotent-replayed") === "true", body: await res.text() };
}

describe("one API, group commit", () => {
  test("refunds queued behind held statements go in batches; never past the amount; sequences 1..n", async () => {
    const charges = await Promise.all([1000, 1000, 1000].map(async (amountCents) => ({ id: await newCharge(api, amountCents), amountCents })));
    // Two statements in flight (API_CHARGE_STATEMENTS), each held inside its statement
    // behind an uncommitted key row, on charges of their own.
    const heldCharges = [await newCharge(api, 1000), await newCharge(api, 1000)];
    const heldKeys = [crypto.randomUUID(), crypto.randomUUID()];
    const holds = await Promise.all(heldKeys.map((k) => holdKey(db.sql, k, REFUNDS_ENDPOINT)));
    const held = heldKeys.map((k, i) => sendRefund(api, heldCharges[i]!, k, 500));
    let sent: Sent[];
    let before: Awaited<ReturnType<typeof groupCommit>>;
    try {
      await waitUntil(async () => (await blockedBackends()) === 2, 10_000, "both statements held");
      // 30 refunds (the pool gate's 32 less the two held), 10 per charge, asking ~1,400 of each 1,000.
      const wave = charges.flatMap((c) => Array.from({ length: 10 }, () => sendRefund(api, c.id, crypto.randomUUID(), amount(60, 220))));
      // A text showing the 30 queued was rendered once they all were, and a request is counted
      // as its statement is sent: the totals in it are those before the queued ones.
      before = await waitUntil(async () => ((now) => now.queued === 30 && now)(await groupCommit()), 10_000, "30 refunds queued");
      await Promise.all(holds.map((h) => h.release()));
      sent = await Promise.all(wave);
    } finally {
      await Promise.all(holds.map((h) => h.release()));
    }
    for (const h of await Promise.all(held)) expect(h.status).toBe(201);
    // Queued requests shared statements: fewer statements than the requests they answered.
    // The totals only grow: wait until the 30 are counted, then assert exactly.
    const after = await waitUntil(async () => ((now) => now.requests - before.requests >= 30 && now)(await groupCommit()), 5000, "the queued refunds' statements counted");
    const statements = after.statements - before.statements;
    const requests = after.requests - before.requests;
    expect(requests).toBe(30);
    expect(statements).toBeLessThan(requests);

    expect(sent.every((s) => s.status === 201 || s.status === 422)).toBe(true);
    await checkInvariants(db.sql, charges, sent);
    expect(sent.filter((s) => s.status === 422).length).toBeGreaterThan(0);
    // Each charge asked more than its amount, so something was refused of each.
    for (const c of charges) {
      const mine = sent.filter((s) => s.chargeId === c.id);
      if (mine.reduce((sum, s) => sum + s.amountCents, 0) > c.amountCents) expect(mine.some((s) => s.status === 422)).toBe(true);
    }
  });

  test("many concurrent refunds of ONE charge, unheld: the sum stays within the amount and every cent that fit was refunded in order", async () => {
    const charge = { id: await newCharge(api, 5000), amountCents: 5000 };
    const sent = await Promise.all(Array.from({ length: 80 }, () => sendRefund(api, charge.id, crypto.randomUUID(), amount(50, 100))));
    expect(sent.every((s) => s.status === 201 || s.status === 422)).toBe(true);
    await checkInvariants(db.sql, [charge], sent);
    const l = await ledger(db.sql, charge.id);
    expect(l.refunds).toBe(sent.filter((s) => s.status === 201).length);
    expect(sent.some((s) => s.status === 422)).toBe(true);
    // The events' refunded totals follow the sequence: each the previous plus its amount.
    const events = await db.sql<{ sequence: number; payload: string }[]>`
      select sequence, payload from outbox where aggregate_id = ${charge.id} and event_type = 'ChargeRefunded' order by sequence`;
    let total = 0;
    for (const e of events) {
      const data = JSON.parse(e.payload) as { amountCents: number; refundedCents: number };
      total += data.amountCents;
      expect(data.refundedCents).toBe(total);
    }
    expect(total).toBe(l.refundedCents);
  });
});

describe("a resend after a lost answer", () => {
  test("the same refund sent three times at once, for ten keys: one refund per key, every other answer a replay or a 409", async () => {
    const charge = { id: await newCharge(api, 1000), amountCents: 1000 };
    const keys = Array.from({ length: 10 }, () => crypto.randomUUID());
    // 10 × 100 fits exactly: every key must end with its refund, and only one.
    const sent = await Promise.all(keys.flatMap((k) => [0, 1, 2].map(() => sendRefund(api, charge.id, k, 100))));
    expect(sent.every((s) => s.status === 201 || s.status === 409)).toBe(true);
    await checkInvariants(db.sql, [charge], sent);
    // Whatever the first tries answered, a later resend replays the one refund of each key.
    for (const k of keys) {
      const again = await sendRefund(api, charge.id, k, 100);
      expect(again.status).toBe(201);
      expect(again.replayed).toBe(true);
      const first = sent.find((s) => s.key === k && s.status === 201);
      if (first) expect(again.body).toBe(first.body);
    }
    expect(await ledger(db.sql, charge.id)).toMatchObject({ refundedCents: 1000, refunds: 10, sequences: oneTo(11) });
  });

  test("the first try committed but its answer was never read: the resend replays it, one refund", async () => {
    const chargeId = await newCharge(api, 1000);
    const k = crypto.randomUUID();
    // The client gives up on the answer (its connection dropped); the server committed.
    const lost = await postRefund(api, chargeId, refundBody(250), { key: k });
    void lost.body?.cancel();
    const resend = await sendRefund(api, chargeId, k, 250);
    expect(resend.status).toBe(201);
    expect(resend.replayed).toBe(true);
    expect(await ledger(db.sql, chargeId)).toMatchObject({ refundedCents: 250, refundsSum: 250, refunds: 1, sequences: [1, 2] });
  });
});

describe("two API processes on one database", () => {
  // Small pools: two processes and the other test files share one server's max_connections.
  // Generous pool wait and request bounds: a 503 would be an overloaded 2-core machine, not the race.
  const env = {
    DATABASE_URL: db.url,
    API_POOL_SIZE: "8",
    API_POOL_WAIT_MS: "10000",
    API_REQUEST_TIMEOUT_MS: "30000",
    API_LOCK_TIMEOUT_MS: "10000",
    API_STATEMENT_TIMEOUT_MS: "20000",
    LOG_LEVEL: "warn",
    ...authEnv(),
  };
  const apis: Service[] = [];
  afterAll(async () => {
    await Promise.all(apis.map((a) => a.child.stop()));
  });

  test("60 refunds over 4 charges, each key sent to both processes at once: within every amount, one refund per key, no 5xx", async () => {
    apis.push(...(await Promise.all([startEntrypoint("api", { env, stdout: "tail" }), startEntrypoint("api", { env, stdout: "tail" })])));
    const headers = { "content-type": "application/json", ...(await authHeaders()) };
    const post = async (base: string, path: string, key: string, body: string) => {
      const res = await fetch(`${base}${path}`, { method: "POST", headers: { ...headers, "idempotency-key": key }, body });
      return { status: res.status, replayed: res.headers.get("idempotent-replayed") === "true", body: await res.text() };
    };
    const charges: { id: string; amountCents: number }[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await post(apis[i % 2]!.base, "/charges", crypto.randomUUID(), refundBody(1000));
      expect(res.status).toBe(201);
      charges.push({ id: (JSON.parse(res.body) as { id: string }).id, amountCents: 1000 });
    }
    // 15 refunds per charge of 40..160 cents: ~1,500 asked of each 1,000, so some must be refused.
    const plan = charges.flatMap((c) => Array.from({ length: 15 }, () => ({ chargeId: c.id, key: crypto.randomUUID(), amountCents: amount(40, 160) })));
    const sent = await Promise.all(
      plan.flatMap((p) =>
        apis.map(async (a) => ({ ...p, ...(await post(a.base, `/charges/${p.chargeId}/refunds`, p.key, refundBody(p.amountCents))) })),
      ),
    );
    expect(apis.every((a) => !a.child.exited)).toBe(true);
    // Any other answer, with its body: what went wrong, not only that something did.
    expect(sent.filter((s) => ![201, 409, 422].includes(s.status)).map((s) => `${s.status} ${s.body}`)).toEqual([]);
    await checkInvariants(db.sql, charges, sent);
    expect(sent.filter((s) => s.status === 422).length).toBeGreaterThan(0);
    expect(sent.filter((s) => s.status === 201).length).toBeGreaterThan(0);
    // The two sends of a key really met: one of them found the other in flight or committed.
    expect(sent.some((s) => s.status === 409 || s.replayed)).toBe(true);
    // A key that met only 409s still has one answer now: its refund replayed, or a justified refusal.
    const resent = await Promise.all(plan.map(async (p) => ({ ...p, ...(await post(apis[0]!.base, `/charges/${p.chargeId}/refunds`, p.key, refundBody(p.amountCents))) })));
    expect(resent.every((s) => s.status === 201 || s.status === 422)).toBe(true);
    await checkInvariants(db.sql, charges, [...sent, ...resent]);
    for (const r of resent.filter((s) => s.status === 201)) {
      const before = sent.filter((s) => s.key === r.key && s.status === 201);
      // Replayed unless neither first try got through (both 409s) and this one made it.
      if (before.length > 0) expect(r.replayed).toBe(true);
    }
  });
});

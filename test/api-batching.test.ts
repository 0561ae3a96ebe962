// Group commit: several requests in one statement (lib/idempotency/skeleton.ts runClaim,
// the same statement a request alone runs with one row) and the engine that forms them under
// load (core/group.ts), here for the charges operation. Each request must get exactly what it
// would get alone; the batch is held deterministically behind a key row the test keeps
// uncommitted, and the queue is watched through the batcher's own counters.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { createSql, sqlState } from "../lib/platform/db.ts";
import { compile, runClaim, type KeyRow, type RequestRow } from "../lib/idempotency/skeleton.ts";
import { createGroupCommit, type GroupStatement } from "../lib/idempotency/group-commit.ts";
import { endpointOf } from "../lib/idempotency/model.ts";
import { advisoryLockId, fingerprint } from "../lib/idempotency/keys.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { chargeCreatedPayload } from "../lib/charges/events.ts";
import { REQUEST_DEADLINE } from "../lib/platform/pool-gate.ts";
import { freshDatabase } from "../testkit/services.ts";
import { holdKey } from "../testkit/database.ts";
import { postCharge, startTestApi, TEST_API_APP, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("api_batching");
const sql = createSql(db.url, { max: 8, applicationName: TEST_API_APP });
afterAll(async () => {
  await sql.end({ timeout: 5 });
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

const STATEMENT_TIMEOUT_MS = 5_000;
const TTL_SECONDS = 3600;
const compiledCharge = compile(sql, createCharge, "ledger");
const CHARGES_ENDPOINT = endpointOf(createCharge);

/** A charge request: its statement row, and what the test checks it by. */
interface ChargeRequest {
  readonly chargeId: string;
  readonly tenant: string;
  readonly lockId: string;
  readonly requestHash: string;
  readonly responseBody: string;
  readonly row: RequestRow;
}

// Built by hand rather than by createCharge.prepare, so that a row the API would never send
// (a negative amount) can still reach the database.
function chargeRow(tenant: string, key: string, amountCents = 4900): ChargeRequest {
  const chargeId = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  const lockId = advisoryLockId(tenant, key, CHARGES_ENDPOINT);
  const requestHash = fingerprint(createCharge.fingerprint({ params: {}, body: { amountCents } }));
  const responseBody = JSON.stringify({ id: chargeId, amountCents, createdAt });
  const row = {
    tenant, key, lock_id: lockId, request_hash: requestHash, response_body: responseBody, event_id: crypto.randomUUID(), traceparent: null,
    charge_id: chargeId, amount_cents: amountCents, currency: "usd", status: "succeeded", created_at: createdAt, payload: chargeCreatedPayload({ chargeId, amountCents, currency: "usd" }),
  };
  return { chargeId, tenant, lockId, requestHash, responseBody, row };
}

const run = (requests: readonly ChargeRequest[]): Promise<KeyRow[]> => runClaim(sql, compiledCharge, { ttlSeconds: TTL_SECONDS, leaseMs: 0 }, requests.map((r, n) => ({ ...r.row, n })));
const runAlone = async (request: ChargeRequest): Promise<KeyRow> => (await run([request]))[0]!;

/** The charges (with their tenant and transaction) and events in the database. */
async function written(): Promise<{ id: string; tenant: string; xmin: string; events: number }[]> {
  return db.sql<{ id: string; tenant: string; xmin: string; events: number }[]>`
    select c.id, c.tenant, c.xmin::text as xmin,
           (select count(*) from outbox o where o.aggregate_id = c.id and o.tenant = c.tenant)::int as events
      from charges c order by c.created_at, c.id`;
}

test("one statement for six requests answers each as it would be answered alone, in one transaction", async () => {
  // What the one-request statement left behind: a live key (same body, then another body)
  // and one whose tombstone has passed too (the key is new again).
  const replay = chargeRow("tenant-a", "replayed");
  const other = chargeRow("tenant-a", "other-body");
  const expired = chargeRow("tenant-a", "expired");
  for (const p of [replay, other, expired]) expect((await runAlone(p)).created).toBe(1);
  await db.sql`update idempotency_keys set status = 'EXPIRED', response_body = null, expires_at = now() - interval '1 second' where key = 'expired'`;
  // Another session holds the advisory lock of one key: a request in flight.
  const busy = chargeRow("tenant-b", "in-flight");
  const holder = await db.sql.reserve();
  await holder`select pg_advisory_lock(${busy.lockId}::bigint)`;
  try {
    const batch = [
      chargeRow("tenant-a", "new"),
      chargeRow("tenant-b", "new"), // the same key string, another tenant: its own charge
      chargeRow("tenant-a", "replayed"),
      chargeRow("tenant-a", "other-body", 100),
      chargeRow("tenant-a", "expired"),
      busy,
    ];
    const rows = await run(batch);
    expect(rows).toHaveLength(batch.length);
    const alone: Partial<KeyRow>[] = [
      { got: true, created: 1, request_hash: null },
      { got: true, created: 1, request_hash: null },
      { got: null, created: 0, request_hash: replay.requestHash, status: "COMPLETED", response_status: 201, response_body: replay.responseBody },
      { got: null, created: 0, request_hash: other.requestHash, response_body: other.responseBody },
      { got: true, created: 1, request_hash: null },
      { got: false, created: 0, request_hash: null },
    ];
    rows.forEach((row, i) => expect(row).toMatchObject(alone[i]!));
    // The other body is a conflict: its stored fingerprint is not this request's.
    expect(rows[3]!.request_hash).not.toBe(batch[3]!.requestHash);
    const stored = await written();
    const created = [batch[0]!, batch[1]!, batch[4]!];
    for (const p of created) expect(stored).toContainEqual(expect.objectContaining({ id: p.chargeId, tenant: p.tenant, events: 1 }));
    expect(stored).toHaveLength(3 + created.length);
    // The three new charges committed together.
    expect(new Set(stored.filter((c) => created.some((p) => p.chargeId === c.id)).map((c) => c.xmin)).size).toBe(1);
    const [expiredKey] = await db.sql<{ body: string }[]>`select response_body as body from idempotency_keys where key = 'expired'`;
    expect(expiredKey!.body).toBe(batch[4]!.responseBody);
  } finally {
    await holder`select pg_advisory_unlock_all()`;
    holder.release();
  }
});

/** Group commit of one statement at a time, its one statement held on a key row we keep uncommitted. */
async function heldBatcher() {
  const batcher = createGroupCommit({ maxInFlight: 1, maxBatch: 32, statementTimeoutMs: STATEMENT_TIMEOUT_MS });
  // As the core's: one key's requests never share a statement.
  const statement: GroupStatement<ChargeRequest, KeyRow> = { send: (items) => run(items), conflicts: (r) => [`${r.tenant}\n${r.row.key}`] };
  const hold = await holdKey(db.sql, "held", CHARGES_ENDPOINT, "tenant-a");
  const submit = (request: ChargeRequest, endsAt = Number.POSITIVE_INFINITY) => batcher.run(statement, request, endsAt);
  const first = submit(chargeRow("tenant-a", "held"));
  await waitForApiBlockedOnLock(db.sql);
  return { batcher, hold, first, submit };
}

test("requests queued behind a running statement go as one batch; a repeated key waits for its first request's commit and reads it", async () => {
  const { batcher, hold, first, submit } = await heldBatcher();
  const distinct = Array.from({ length: 10 }, (_, i) => chargeRow("tenant-a", `key-${i}`));
  // The same key three times with one body, once with another.
  const repeated = [...Array.from({ length: 3 }, () => chargeRow("tenant-a", "repeated")), chargeRow("tenant-a", "repeated", 100)];
  const answers = [...distinct, ...repeated].map((p) => submit(p));
  await waitUntil(() => batcher.queued === 14, 5000, "14 queued requests");
  await hold.release();
  expect((await first).created).toBe(1);
  const rows = await Promise.all(answers);
  rows.slice(0, 10).forEach((row) => expect(row.created).toBe(1));
  // One creation; the others, sent after its commit, read the key row it stored: the same body
  // is a replay of its answer, the other body a conflict.
  const [created, ...followers] = rows.slice(10);
  expect(created!.created).toBe(1);
  for (const row of followers) {
    expect(row).toMatchObject({ created: 0, request_hash: repeated[0]!.requestHash, status: "COMPLETED", response_status: 201, response_body: repeated[0]!.responseBody });
  }
  // The last one's body differs: the stored fingerprint is not its own (a 422).
  expect(repeated[3]!.requestHash).not.toBe(repeated[0]!.requestHash);
  const stored = await written();
  expect(stored).toHaveLength(12);
  expect(stored.every((c) => c.events === 1)).toBe(true);
  // The ten distinct keys and the repeated one committed in one transaction, one statement.
  const batched = stored.filter((c) => [...distinct, repeated[0]!].some((p) => p.chargeId === c.id));
  expect(batched).toHaveLength(11);
  expect(new Set(batched.map((c) => c.xmin)).size).toBe(1);
});

test("a batch one request of which the database refuses: the others are created, that one gets its error", async () => {
  const { batcher, hold, first, submit } = await heldBatcher();
  const good = [chargeRow("tenant-a", "good-1"), chargeRow("tenant-a", "good-2")];
  // amount_cents > 0 is a check of the table (23514); the API validates it before, so only a bug sends this.
  const bad = chargeRow("tenant-a", "bad", -5);
  const answers = [good[0]!, bad, good[1]!].map((p) => submit(p).then((row) => row, (error: unknown) => error));
  await waitUntil(() => batcher.queued === 3, 5000, "3 queued requests");
  await hold.release();
  await first;
  const [a, refused, b] = await Promise.all(answers);
  expect((a as KeyRow).created).toBe(1);
  expect((b as KeyRow).created).toBe(1);
  expect(sqlState(refused)).toBe("23514");
  const stored = await written();
  // The held request's charge and the two good ones.
  expect(stored).toHaveLength(3);
  for (const p of good) expect(stored).toContainEqual(expect.objectContaining({ id: p.chargeId, events: 1 }));
  expect(await db.sql`select 1 from idempotency_keys where key = 'bad'`).toHaveLength(0);
});

test("a queued request whose deadline leaves no room for a statement is refused, with nothing sent", async () => {
  const { batcher, hold, first, submit } = await heldBatcher();
  // Its deadline is already nearer than one statement's bound when it is taken from the queue.
  const late = submit(chargeRow("tenant-a", "late"), performance.now() + STATEMENT_TIMEOUT_MS - 1).then(
    () => "sent",
    (error: unknown) => sqlState(error),
  );
  await waitUntil(() => batcher.queued === 1, 5000, "1 queued request");
  await hold.release();
  await first;
  expect(await late).toBe(REQUEST_DEADLINE);
  expect(await db.sql`select 1 from idempotency_keys where key = 'late'`).toHaveLength(0);
});

test("through HTTP with one charge statement at a time, 24 concurrent POSTs: each a 201 with its own charge and event", async () => {
  const api = await startTestApi(db.url, { API_CHARGE_STATEMENTS: "1" });
  try {
    const keys = Array.from({ length: 24 }, () => crypto.randomUUID());
    const answers = await Promise.all(keys.map((key) => postCharge(api, '{"amountCents":4900}', { key })));
    const bodies = (await Promise.all(answers.map((res) => res.json()))) as { id: string }[];
    expect(answers.map((res) => res.status)).toEqual(keys.map(() => 201));
    const stored = await written();
    expect(stored.map((c) => c.id).sort()).toEqual(bodies.map((b) => b.id).sort());
    expect(stored.every((c) => c.events === 1 && c.tenant === "tenant-a")).toBe(true);
    const replay = await postCharge(api, '{"amountCents":4900}', { key: keys[7]! });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(((await replay.json()) as { id: string }).id).toBe(bodies[7]!.id);
  } finally {
    await api.close();
  }
});

// The operations jobs on real Postgres, and `bun run ops` as a user runs it.
import { setDefaultTimeout } from "bun:test";
import { afterAll, beforeEach, expect, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { DELETE_BATCH, newGauges, registerOpsGauges, runJob } from "../lib/ops/jobs.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { freshDatabase } from "../testkit/services.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { runToExit, type Finished } from "../testkit/processes.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("ops");
const config = loadConfig({ DATABASE_URL: db.url, OUTBOX_RETENTION_SECONDS: "3600" });
afterAll(() => db.drop());
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

async function insertCharge(withOutbox: boolean, publishedAgo?: string): Promise<string> {
  const id = crypto.randomUUID();
  await db.sql`insert into charges (id, amount_cents) values (${id}, 100)`;
  if (withOutbox) {
    await db.sql`insert into outbox (id, aggregate_id, event_type, payload, published_at)
                 values (${crypto.randomUUID()}, ${id}, 'ChargeCreated', '{}',
                         ${publishedAgo === undefined ? null : db.sql`now() - ${publishedAgo}::interval`})`;
  }
  return id;
}

test("key-retention turns expired COMPLETED keys into tombstones in bounded batches (Location and completion kept, body and resume dropped), and nothing else", async () => {
  const expired = DELETE_BATCH * 2 + 500;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, resume, created_at, expires_at)
               select 'k' || i, 'POST /charges', 'h', 'COMPLETED', 201, '{"id":"' || gen_random_uuid() || '"}', '{"a":1}',
                      now() - interval '1 day', now() - interval '1 minute'
                 from generate_series(1, ${expired}) as i`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, expires_at) values
               ('live', 'POST /charges', 'h', 'COMPLETED', now() + interval '1 hour'),
               ('started-expired', 'POST /charges', 'h', 'STARTED', now() - interval '1 minute')`;
  const before = await db.sql<{ body: string; expires: Date; created: Date }[]>`select response_body as body, expires_at as expires, created_at as created from idempotency_keys where key = 'k1'`;
  const result = await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ tombstoned: expired, deleted: 0, batches: 3 });
  const states = await db.sql<{ status: string; n: number }[]>`select status, count(*)::int as n from idempotency_keys group by status order by status`;
  expect([...states]).toEqual([{ status: "COMPLETED", n: 1 }, { status: "EXPIRED", n: expired }, { status: "STARTED", n: 1 }]);
  const [k1] = await db.sql<{ body: string | null; resume: unknown; location: string; completed: Date; expires: Date; response_status: number }[]>`
    select response_body as body, resume, location, completed_at as completed, expires_at as expires, response_status from idempotency_keys where key = 'k1'`;
  expect(k1).toMatchObject({ body: null, resume: null, response_status: 201, location: `/charges/${JSON.parse(before[0]!.body).id}` });
  expect(k1!.completed.getTime()).toBe(before[0]!.created.getTime());
  // The tombstone's end: the answer's expiry plus IDEMPOTENCY_TOMBSTONE_SECONDS (30 days by default).
  expect(k1!.expires.getTime() - before[0]!.expires.getTime()).toBe(30 * 86_400_000);
});

test("key-retention deletes tombstones past their end, in the same bounded batches; a tombstone still in its window stays", async () => {
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, location, expires_at) values
               ('gone', 'POST /charges', 'h', 'EXPIRED', 201, '/charges/x', now() - interval '1 second'),
               ('kept', 'POST /charges', 'h', 'EXPIRED', 201, '/charges/y', now() + interval '1 day')`;
  const result = await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ tombstoned: 0, deleted: 1, batches: 1 });
  expect((await db.sql<{ key: string }[]>`select key from idempotency_keys`).map((r) => r.key)).toEqual(["kept"]);
});

test("IDEMPOTENCY_TOMBSTONE_SECONDS=0: an expired key is tombstoned and deleted in the same run (no 410 window)", async () => {
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, expires_at) values
               ('short', 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() - interval '1 minute')`;
  const result = await runJob("key-retention", db.sql, loadConfig({ DATABASE_URL: db.url, IDEMPOTENCY_TOMBSTONE_SECONDS: "0" }), newGauges(), silentLogger);
  // '{}' names no resource: the tombstone has none, and retention goes on.
  expect(result).toMatchObject({ tombstoned: 1, deleted: 1 });
  expect(await db.sql`select key from idempotency_keys`).toHaveLength(0);
});

test("key-retention tombstones an expired key of one tenant, never another tenant's live key of the same name", async () => {
  await db.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at) values
               ('tenant-a', 'order-1', 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() - interval '1 minute'),
               ('tenant-b', 'order-1', 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() + interval '1 hour')`;
  const result = await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ tombstoned: 1 });
  const left = await db.sql<{ tenant: string; status: string }[]>`select tenant, status from idempotency_keys where key = 'order-1' order by tenant`;
  expect([...left]).toEqual([{ tenant: "tenant-a", status: "EXPIRED" }, { tenant: "tenant-b", status: "COMPLETED" }]);
});

test("stale-keys reports old STARTED keys with their age and deletes none", async () => {
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, created_at, expires_at) values
               ('stuck', 'POST /charges', 'h', 'STARTED', now() - interval '10 minutes', now() + interval '1 hour'),
               ('fresh', 'POST /charges', 'h', 'STARTED', now(), now() + interval '1 hour')`;
  const gauges = newGauges();
  const result = await runJob("stale-keys", db.sql, config, gauges, silentLogger);
  expect(result).toMatchObject({ count: 1 });
  expect(gauges.staleStartedKeys).toBe(1);
  expect(gauges.staleStartedOldestSeconds).toBeGreaterThanOrEqual(600);
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys`;
  expect(row?.n).toBe(2);
});

test("reconcile: a charge written by hand without an outbox row moves charges_without_outbox on /metrics", async () => {
  const telemetry = startTelemetry("ops-test", undefined, false);
  const gauges = newGauges();
  registerOpsGauges(gauges, telemetry.provider.getMeter("charges"));
  const api = await startTestApi(db.url);
  try {
    expect((await postCharge(api, '{"amountCents":100}', { key: crypto.randomUUID() })).status).toBe(201);
    const scrape = async () => (await telemetry.scrape()).text();
    await runJob("reconcile", db.sql, config, gauges, silentLogger);
    expect(await scrape()).toMatch(/^charges_without_outbox 0$/m);

    const orphan = await insertCharge(false);
    const result = await runJob("reconcile", db.sql, config, gauges, silentLogger);
    expect(result).toMatchObject({ count: 1, sample: [orphan] });
    expect(await scrape()).toMatch(/^charges_without_outbox 1$/m);

    // Older than the outbox retention: its published row may be gone on purpose.
    await db.sql`update charges set created_at = now() - interval '2 hours' where id = ${orphan}`;
    await runJob("reconcile", db.sql, config, gauges, silentLogger);
    expect(await scrape()).toMatch(/^charges_without_outbox 0$/m);
  } finally {
    await api.close();
    await telemetry.shutdown();
  }
});

test("outbox-retention deletes published rows past the retention, keeps recent and pending ones", async () => {
  const old = await insertCharge(true, "2 hours");
  const recent = await insertCharge(true, "1 minute");
  const pending = await insertCharge(true);
  const result = await runJob("outbox-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ deleted: 1 });
  const left = await db.sql<{ aggregate_id: string }[]>`select aggregate_id from outbox`;
  expect(left.map((r) => r.aggregate_id).sort()).toEqual([recent, pending].sort());
  expect(left.map((r) => r.aggregate_id)).not.toContain(old);
});

test("outbox-gauges counts pending and parked rows and the oldest pending age", async () => {
  await insertCharge(true);
  const parkedCharge = await insertCharge(true);
  await db.sql`update outbox set parked_at = now() where aggregate_id = ${parkedCharge}`;
  await db.sql`update outbox set created_at = now() - interval '30 seconds' where parked_at is null`;
  await insertCharge(true, "1 minute");
  const gauges = newGauges();
  await runJob("outbox-gauges", db.sql, config, gauges, silentLogger);
  expect(gauges.pending).toBe(1);
  expect(gauges.parked).toBe(1);
  expect(gauges.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(30);
});

function ops(...args: string[]): Promise<Finished> {
  return runToExit(["bun", "run", "--silent", "ops", ...args], { DATABASE_URL: db.url, LOG_LEVEL: "warn" });
}

test("bun run ops requeue <id|all> puts parked rows back in line; bad input is one clear line", async () => {
  const a = await insertCharge(true);
  const b = await insertCharge(true);
  await db.sql`update outbox set parked_at = now(), attempts = 10, last_error = 'x'`;
  const [rowA] = await db.sql<{ id: string }[]>`select id from outbox where aggregate_id = ${a}`;

  const one = await ops("requeue", rowA!.id);
  expect(one.code).toBe(0);
  expect(JSON.parse(one.stdout)).toMatchObject({ job: "requeue", requeued: 1 });
  const all = await ops("requeue", "all");
  expect(JSON.parse(all.stdout)).toMatchObject({ requeued: 1 });
  const rows = await db.sql`select parked_at, attempts from outbox where aggregate_id in (${a}, ${b})`;
  expect(rows.every((r) => r.parked_at === null && r.attempts === 0)).toBe(true);

  const unknown = await ops("vacuum-everything");
  expect(unknown.code).toBe(2);
  expect(unknown.stderr.trim().split("\n")).toHaveLength(1);
  expect(unknown.stderr).toContain("unknown job");

  const reconcile = await ops("reconcile");
  expect(reconcile.code).toBe(0);
  expect(JSON.parse(reconcile.stdout)).toMatchObject({ job: "reconcile", count: 0 });
});

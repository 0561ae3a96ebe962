// The operations jobs on real Postgres, and `bun run ops` as a user runs it.
import { setDefaultTimeout } from "bun:test";
import { afterAll, beforeEach, expect, test } from "bun:test";
import { loadConfig } from "../lib/shared/config.ts";
import { silentLogger } from "../lib/shared/log.ts";
import { DELETE_BATCH, newGauges, registerOpsGauges, runJob } from "../lib/ops/jobs.ts";
import { startTelemetry } from "../lib/shared/telemetry.ts";
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

test("key-retention deletes expired COMPLETED keys in bounded batches and nothing else", async () => {
  const expired = DELETE_BATCH * 2 + 500;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, expires_at)
               select gen_random_uuid()::text, 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() - interval '1 minute'
                 from generate_series(1, ${expired})`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, expires_at) values
               ('live', 'POST /charges', 'h', 'COMPLETED', now() + interval '1 hour'),
               ('started-expired', 'POST /charges', 'h', 'STARTED', now() - interval '1 minute')`;
  const result = await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ deleted: expired, batches: 3 });
  const left = await db.sql<{ key: string }[]>`select key from idempotency_keys order by key`;
  expect(left.map((r) => r.key)).toEqual(["live", "started-expired"]);
});

test("key-retention deletes an expired key of one tenant, never another tenant's live key of the same name", async () => {
  await db.sql`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at) values
               ('tenant-a', 'order-1', 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() - interval '1 minute'),
               ('tenant-b', 'order-1', 'POST /charges', 'h', 'COMPLETED', 201, '{}', now() + interval '1 hour')`;
  const result = await runJob("key-retention", db.sql, config, newGauges(), silentLogger);
  expect(result).toMatchObject({ deleted: 1 });
  const left = await db.sql<{ tenant: string }[]>`select tenant from idempotency_keys where key = 'order-1'`;
  expect(left.map((r) => r.tenant)).toEqual(["tenant-b"]);
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

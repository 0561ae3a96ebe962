// The upgrade to the payment processor's release (migration 0004) from the release before it:
// that release's migrations (0001–0003, whose schema is test/fixtures/schema-release-0003.sql,
// its schema.sql byte for byte) with rows in its shape, then the migrations a process runs at
// start. No row is lost, old rows read as what they were (succeeded charges in usd, keys
// without a lease), and this release carries on with them in both modes: an old key replays
// its bytes; a charge taken without a processor is refunded by the ledger, and refused (422
// charge-not-refundable) through a processor, which has no payment of it.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFile } from "node:fs/promises";
import { v7 as uuidV7 } from "uuid";
import { newGauges, runJob } from "../lib/ops/jobs.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { migrate, readMigrations } from "../lib/platform/migrations.ts";
import { sha256Hex } from "../lib/platform/sha256.ts";
import { applySchema } from "../lib/platform/startup.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { describeSchema } from "../testkit/catalog.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { chargeWith, processorEnv } from "../testkit/processor.ts";
import { postRefund, refundBody } from "../testkit/refunds.ts";
import { services } from "../testkit/services.ts";

setDefaultTimeout(60_000);

const TABLES = ["charges", "refunds", "idempotency_keys", "outbox"] as const;
const PREVIOUS = ["0001_baseline", "0002_refunds_and_sequences", "0003_subscriber_sequences"];
const AMOUNT_CENTS = 5000;
// What that release fingerprinted for {"amountCents": N}: this release keeps it.
const REQUEST_HASH = sha256Hex(`{"amountCents":${AMOUNT_CENTS}}`);

type Row = Record<string, unknown>;
type Snapshot = Record<(typeof TABLES)[number], Row[]>;

const { adminDatabaseUrl } = await services();
let db: ScratchDatabase;
let sim: ProcessorSim;
let before: Snapshot;
let applied: readonly string[];
let old: { chargeId: string; key: string; body: string; legacyKey: string };

beforeAll(async () => {
  db = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_processor"), { migrate: false });
  sim = await startProcessorSim();
  // That release's migrate(): its three files, which this release ships unchanged.
  const known = await readMigrations();
  expect(known.slice(0, 3).map((m) => m.name)).toEqual(PREVIOUS);
  await migrate(db.sql, known.slice(0, 3));
  old = await writeAsThePreviousRelease(db.sql);
  before = await snapshot(db.sql);
  applied = await applySchema(createSql(db.url, { max: 1, applicationName: "charges-upgrade" }));
});
afterAll(async () => {
  await sim.stop();
  await db.drop();
});

/** A charge with a refund (events 1 and 2), their completed keys, and a STARTED key another writer left. */
async function writeAsThePreviousRelease(sql: Sql): Promise<typeof old> {
  const chargeId = crypto.randomUUID();
  const refundId = crypto.randomUUID();
  const key = "previous-release-key";
  const createdAt = "2026-11-01T10:00:00.000Z";
  const body = JSON.stringify({ id: chargeId, amountCents: AMOUNT_CENTS, createdAt });
  await sql.begin(async (tx) => {
    await tx`insert into charges (id, tenant, amount_cents, refunded_cents, last_sequence, created_at)
             values (${chargeId}, ${TEST_TENANT}, ${AMOUNT_CENTS}, 1000, 2, ${createdAt})`;
    await tx`insert into refunds (id, charge_id, tenant, amount_cents, created_at) values (${refundId}, ${chargeId}, ${TEST_TENANT}, 1000, ${createdAt})`;
    await tx`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, created_at, expires_at)
             values (${TEST_TENANT}, ${key}, 'POST /charges', ${REQUEST_HASH}, 'COMPLETED', 201, ${body}, ${createdAt}, now() + interval '1 day')`;
    await tx`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, created_at, expires_at)
             values (${TEST_TENANT}, 'legacy-started', 'POST /charges', 'h', 'STARTED', now() - interval '1 hour', now() + interval '1 day')`;
    await tx`insert into outbox (id, aggregate_type, aggregate_id, sequence, tenant, event_type, payload)
             values (${uuidV7()}, 'charge', ${chargeId}, 1, ${TEST_TENANT}, 'ChargeCreated', ${JSON.stringify({ chargeId, amountCents: AMOUNT_CENTS })}),
                    (${uuidV7()}, 'charge', ${chargeId}, 2, ${TEST_TENANT}, 'ChargeRefunded', ${JSON.stringify({ chargeId, refundId, amountCents: 1000, refundedCents: 1000 })})`;
  });
  return { chargeId, key, body, legacyKey: "legacy-started" };
}

async function snapshot(sql: Sql): Promise<Snapshot> {
  const entries = await Promise.all(
    TABLES.map(async (table) => {
      const rows = await sql<{ row: Row }[]>`select to_jsonb(t) as row from ${sql(table)} t`;
      return [table, rows.map((r) => r.row).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))] as const;
    }),
  );
  return Object.fromEntries(entries) as Snapshot;
}

const asBefore = (rows: Row[], like: Row[]): Row[] => {
  const columns = Object.keys(like[0] ?? {});
  return rows.map((row) => Object.fromEntries(columns.map((c) => [c, row[c]])));
};

describe("migrating a database of the release before the payment processor", () => {
  test("it was that release's schema (the fixture), and only 0004 and the later ones run", async () => {
    expect(applied).toEqual((await readMigrations()).map((m) => m.name).filter((name) => name >= "0004"));
    const reference = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_processor_ref"), { migrate: false });
    try {
      await reference.sql.unsafe(await readFile(new URL("fixtures/schema-release-0003.sql", import.meta.url), "utf8"));
      const previous = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_processor_prev"), { migrate: false });
      try {
        await migrate(previous.sql, (await readMigrations()).slice(0, 3));
        expect(await describeSchema(previous.sql, ["schema_history"])).toEqual(await describeSchema(reference.sql, ["schema_history"]));
      } finally {
        await previous.drop();
      }
    } finally {
      await reference.drop();
    }
  });

  test("no row is lost, and old rows read as what they were: succeeded charges in usd, nothing reserved, keys without a lease", async () => {
    const after = await snapshot(db.sql);
    for (const table of TABLES) {
      expect(after[table]).toHaveLength(before[table].length);
      expect(asBefore(after[table], before[table])).toEqual(before[table]);
    }
    expect(after.charges.map((c) => [c.status, c.currency, c.pending_refund_cents, c.processor_payment_id])).toEqual([["succeeded", "usd", 0, null]]);
    expect(after.refunds.map((r) => r.status)).toEqual(["succeeded"]);
    expect(new Set(after.idempotency_keys.map((k) => `${k.lease_token} ${k.lease_until} ${k.recovery_point} ${k.attempts} ${k.parked_at}`))).toEqual(new Set(["null null null 0 null"]));
    expect(await migrate(db.sql)).toEqual({ kind: "current" });
  });
});

describe("this release on the upgraded database", () => {
  test("the ledger (PAYMENT_PROCESSOR=none): the old key replays its bytes, the old charge is refunded", async () => {
    const api = await startTestApi(db.url);
    try {
      const replay = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key: old.key });
      expect(replay.status).toBe(201);
      expect(await replay.text()).toBe(old.body);
      expect((await postRefund(api, old.chargeId, refundBody(500), { key: crypto.randomUUID() })).status).toBe(201);
    } finally {
      await api.close();
    }
  });

  test("through the processor: the old key still replays; the old charge is not refundable there (no payment of it); new charges go through", async () => {
    const api = await startTestApi(db.url, processorEnv(sim));
    try {
      const replay = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key: old.key });
      expect(replay.status).toBe(201);
      expect(await replay.text()).toBe(old.body);
      const refund = await postRefund(api, old.chargeId, refundBody(500), { key: crypto.randomUUID() });
      expect(refund.status).toBe(422);
      expect(((await refund.json()) as { type: string }).type).toBe("https://charges.example/problems/charge-not-refundable");
      expect(sim.ledger().refunds).toEqual([]);
      expect((await postCharge(api, chargeWith(700), { key: crypto.randomUUID() })).status).toBe(201);
    } finally {
      await api.close();
    }
  });

  test("a STARTED key another writer left is reported stale, and the completer leaves it alone (it has no lease or recovery point)", async () => {
    const config = loadConfig({ DATABASE_URL: db.url, ...processorEnv(sim) });
    expect(await runJob("stale-keys", db.sql, config, newGauges(), silentLogger)).toMatchObject({ count: 1 });
    expect(await runJob("completer", db.sql, config, newGauges(), silentLogger)).toMatchObject({ claimed: 0 });
    const [row] = await db.sql`select status, lease_token from idempotency_keys where key = ${old.legacyKey}`;
    expect(row).toEqual({ status: "STARTED", lease_token: null });
  });
});

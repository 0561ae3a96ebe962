// The upgrade from the previous release: its schema (test/fixtures/schema-previous.sql, its
// schema.sql byte for byte), its ledger (the file's hash in schema_migrations) and rows as
// its API and relay wrote them, then the migrations the processes run at start. No row is
// lost, old rows read as what they are (each outbox row a charge's first event), and this
// release's API and relay carry on with them: an old key replays its stored bytes, old
// pending rows are published.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFile } from "node:fs/promises";
import { v7 as uuidV7 } from "uuid";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { sha256Hex } from "../lib/platform/sha256.ts";
import { migrate, readMigrations } from "../lib/platform/migrations.ts";
import { applySchema } from "../lib/platform/startup.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { describeSchema } from "../testkit/catalog.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { collect } from "../testkit/mqtt.ts";
import { countWhere } from "../testkit/outbox.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

// Tables of the previous release whose rows must all survive, with the columns they had.
const TABLES = ["charges", "idempotency_keys", "outbox", "inbox", "subscriber_dead_letters"] as const;
const CHARGES = 6;
const AMOUNT_CENTS = 4900;
const ENDPOINT = "POST /charges";
// The request hash the previous release stored: SHA-256 of the canonical {"amountCents":N}.
const REQUEST_HASH = sha256Hex(`{"amountCents":${AMOUNT_CENTS}}`);

type Row = Record<string, unknown>;
type Snapshot = Record<(typeof TABLES)[number], Row[]>;

interface OldRows {
  readonly keys: { key: string; body: string }[];
  readonly pending: string[];
  readonly published: string[];
}

const { adminDatabaseUrl, mqttUrl } = await services();
let db: ScratchDatabase;
let old: OldRows;
let before: Snapshot;
let applied: readonly string[];

beforeAll(async () => {
  db = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade"), { migrate: false });
  await previousRelease(db.sql);
  old = await writeAsThePreviousRelease(db.sql);
  before = await snapshot(db.sql);
  // What every process calls at start, on a pool of its own as a starting process has.
  applied = await applySchema(createSql(db.url, { max: 1, applicationName: "charges-upgrade" }));
});
afterAll(() => db.drop());

/** The previous release's schema, applied and recorded the way its migrate() did. */
async function previousRelease(sql: Sql): Promise<void> {
  const schema = await readFile(new URL("fixtures/schema-previous.sql", import.meta.url), "utf8");
  // A fixture of this repository, never input: several statements in one go.
  await sql.unsafe(schema);
  await sql`create table schema_migrations (hash text primary key, applied_at timestamptz not null default now())`;
  await sql`insert into schema_migrations (hash) values (${sha256Hex(schema)})`;
}

/** Charges with their completed keys and outbox rows, half of them published; one inbox row. */
async function writeAsThePreviousRelease(sql: Sql): Promise<OldRows> {
  const rows: OldRows = { keys: [], pending: [], published: [] };
  for (let i = 0; i < CHARGES; i++) {
    const chargeId = crypto.randomUUID();
    const eventId = uuidV7();
    const key = `old-key-${i}`;
    const createdAt = `2026-06-0${i + 1}T10:00:00.000Z`;
    const body = JSON.stringify({ id: chargeId, amountCents: AMOUNT_CENTS, createdAt });
    const publishedAt = i % 2 === 0 ? createdAt : null;
    await sql.begin(async (tx) => {
      await tx`insert into charges (id, tenant, amount_cents, created_at) values (${chargeId}, ${TEST_TENANT}, ${AMOUNT_CENTS}, ${createdAt})`;
      await tx`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, response_status, response_body, created_at, expires_at)
               values (${TEST_TENANT}, ${key}, ${ENDPOINT}, ${REQUEST_HASH}, 'COMPLETED', 201, ${body}, ${createdAt}, now() + interval '1 day')`;
      await tx`insert into outbox (id, aggregate_id, tenant, event_type, payload, created_at, published_at, attempts)
               values (${eventId}, ${chargeId}, ${TEST_TENANT}, 'ChargeCreated',
                       ${JSON.stringify({ chargeId, amountCents: AMOUNT_CENTS })}, ${createdAt}, ${publishedAt}, ${publishedAt ? 1 : 0})`;
    });
    rows.keys.push({ key, body });
    (publishedAt ? rows.published : rows.pending).push(eventId);
  }
  await sql`insert into inbox (event_id, consumer) values (${rows.published[0]!}, 'reference')`;
  return rows;
}

/** Every row of every table, as JSON, in a stable order. */
async function snapshot(sql: Sql): Promise<Snapshot> {
  const entries = await Promise.all(
    TABLES.map(async (table) => {
      const rows = await sql<{ row: Row }[]>`select to_jsonb(t) as row from ${sql(table)} t`;
      return [table, rows.map((r) => r.row).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))] as const;
    }),
  );
  return Object.fromEntries(entries) as Snapshot;
}

/** `rows` with only the columns `like` has: what the previous release could see of them. */
function asBefore(rows: Row[], like: Row[]): Row[] {
  const columns = Object.keys(like[0] ?? {});
  return rows.map((row) => Object.fromEntries(columns.map((c) => [c, row[c]])));
}

describe("migrating a database of the previous release", () => {
  test("applies every migration, loses no row, and gives old rows the new columns' defaults", async () => {
    expect(applied).toEqual((await readMigrations()).map((m) => m.name));
    const after = await snapshot(db.sql);
    for (const table of TABLES) {
      expect(after[table]).toHaveLength(before[table].length);
      expect(asBefore(after[table], before[table])).toEqual(before[table]);
    }
    expect(before.outbox).toHaveLength(CHARGES);
    expect(new Set(after.outbox.map((r) => `${r.aggregate_type} ${r.sequence}`))).toEqual(new Set(["charge 1"]));
    expect(new Set(after.charges.map((r) => `${r.refunded_cents} ${r.last_sequence}`))).toEqual(new Set(["0 1"]));
    // Charges before the payment processor: succeeded at once, in the default currency, nothing reserved.
    expect(new Set(after.charges.map((r) => `${r.status} ${r.currency} ${r.pending_refund_cents} ${r.processor_payment_id}`))).toEqual(new Set(["succeeded usd 0 null"]));
    // Keys before leases: none held, none to resume.
    expect(new Set(after.idempotency_keys.map((r) => `${r.lease_token} ${r.recovery_point} ${r.attempts}`))).toEqual(new Set(["null null 0"]));
    const [ledger] = await db.sql<{ old: string | null; n: number }[]>`
      select to_regclass('schema_migrations')::text as old, (select count(*)::int from schema_history) as n`;
    expect(ledger).toEqual({ old: null, n: (await readMigrations()).length });
  });

  test("ends with exactly the schema schema.sql describes, and migrating again does nothing", async () => {
    const reference = await createScratchDatabase(adminDatabaseUrl, scratchName("t", "upgrade_ref"), { migrate: false });
    try {
      await reference.sql.unsafe(await readFile(new URL("../schema.sql", import.meta.url), "utf8"));
      expect(await describeSchema(db.sql, ["schema_history"])).toEqual(await describeSchema(reference.sql, ["schema_history"]));
    } finally {
      await reference.drop();
    }
    expect(await migrate(db.sql)).toEqual({ kind: "current" });
  });
});

describe("this release's processes on the upgraded database", () => {
  test("the API replays an old key's stored bytes, and writes new charges with the defaults", async () => {
    const api = await startTestApi(db.url);
    try {
      for (const { key, body } of old.keys) {
        const replay = await postCharge(api, JSON.stringify({ amountCents: AMOUNT_CENTS }), { key });
        expect(replay.status).toBe(201);
        expect(replay.headers.get("idempotent-replayed")).toBe("true");
        expect(await replay.text()).toBe(body);
      }
      const created = await postCharge(api, JSON.stringify({ amountCents: 1200 }), { key: "new-key" });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      const [row] = await db.sql<{ refunded: number; last: number; type: string; sequence: number }[]>`
        select c.refunded_cents as refunded, c.last_sequence as last, o.aggregate_type as type, o.sequence
          from charges c join outbox o on o.aggregate_id = c.id where c.id = ${id}`;
      expect(row).toEqual({ refunded: 0, last: 1, type: "charge", sequence: 1 });
    } finally {
      await api.close();
    }
  });

  test("the relay publishes the old pending rows, and not the ones already published", async () => {
    const prefix = `test/${crypto.randomUUID()}/`;
    const collector = await collect(mqttUrl, prefix);
    const relay = await startEntrypoint("relay", {
      env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" },
    });
    try {
      await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 20_000, "every pending row published");
      await collector.barrier();
    } finally {
      expect(await relay.child.stop()).toBe(0);
      await collector.close();
    }
    const ids = collector.ids();
    for (const id of old.pending) expect(ids).toContain(id);
    for (const id of old.published) expect(ids).not.toContain(id);
  });
});

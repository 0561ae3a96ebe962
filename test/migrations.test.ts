// The migrations of migrations/ against schema.sql and against each other: from an empty
// database they give exactly the schema schema.sql describes; a current database is left
// alone (no DDL lock); a ledger that disagrees with the files stops the process; two
// processes migrating at once record each migration once.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFile } from "node:fs/promises";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { checksumOf, migrate, migrationFromFile, MIGRATION_LOCK_ID, planMigrations, readMigrations } from "../lib/platform/migrations.ts";
import { applySchema, StartupError } from "../lib/platform/startup.ts";
import { createScratchDatabase, scratchName, waitForBackendOnLock, type ScratchDatabase } from "../testkit/database.ts";
import { describeSchema } from "../testkit/catalog.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const LEDGER = "schema_history";
// Every migration of migrations/, in order: a new one changes no test.
const FILES = await readMigrations();
const ALL = FILES.map((m) => m.name);
const { adminDatabaseUrl } = await services();
const scratch: ScratchDatabase[] = [];
afterAll(() => Promise.all(scratch.map((db) => db.drop())));

async function emptyDatabase(label: string): Promise<ScratchDatabase> {
  const db = await createScratchDatabase(adminDatabaseUrl, scratchName("t", label), { migrate: false });
  scratch.push(db);
  return db;
}

/** A second pool on `db` under its own application_name, so its backends can be found. */
function poolOn(db: ScratchDatabase, app: string): Sql {
  const sql = createSql(db.url, { max: 1, applicationName: app });
  afterAll(() => sql.end({ timeout: 2 }));
  return sql;
}

describe("from an empty database", () => {
  test("the migrations give exactly the schema schema.sql describes", async () => {
    const [migrated, reference] = await Promise.all([emptyDatabase("mig"), emptyDatabase("ref")]);
    expect(await migrate(migrated.sql)).toEqual({ kind: "applied", names: ALL });
    // schema.sql is part of the repository, never input: several statements in one go.
    await reference.sql.unsafe(await readFile(new URL("../schema.sql", import.meta.url), "utf8"));
    const [got, want] = await Promise.all([describeSchema(migrated.sql, [LEDGER]), describeSchema(reference.sql, [LEDGER])]);
    expect(got).toEqual(want);
    // Not vacuously equal: the description sees the tables and the new columns.
    expect(want.relations).toEqual(expect.arrayContaining([
      "charges r",
      "idempotency_keys r",
      "inbox r",
      "outbox r",
      "refunds r",
      "subscriber_dead_letters r",
      "subscriber_held_events r",
      "subscriber_sequences r",
    ]));
    expect(want.columns).toContain("outbox.sequence integer not null default 1");
    expect(want.constraints).toContain("charges charges_refunded_within_amount CHECK (((refunded_cents >= 0) AND (refunded_cents <= amount_cents)))");
  });

  test("this release's files are numbered 1, 2, … with no gap, and the ledger records each with its checksum", async () => {
    const files = await readMigrations();
    expect(files.map((m) => m.version)).toEqual(files.map((_, i) => i + 1));
    const db = await emptyDatabase("ledger");
    await migrate(db.sql);
    const rows = await db.sql<{ version: number; name: string; checksum: string }[]>`
      select version, name, checksum from schema_history order by version`;
    expect([...rows]).toEqual(files.map(({ version, name, checksum }) => ({ version, name, checksum })));
  });
});

describe("a database already current", () => {
  test("is left alone: migrating takes no lock a reader holds, and says so", async () => {
    const db = await emptyDatabase("current");
    await migrate(db.sql);
    const app = "charges-migrate-current";
    const migrator = poolOn(db, app);
    // ACCESS SHARE, what every running query holds: only DDL's ACCESS EXCLUSIVE waits on it.
    const reader = await db.sql.reserve();
    await reader`begin`;
    await reader`lock table charges, refunds, idempotency_keys, outbox, inbox, subscriber_dead_letters, subscriber_sequences, subscriber_held_events in access share mode`;
    const blocked = () => waitForBackendOnLock(db.sql, app).then(() => "blocked on a table lock" as const);
    try {
      expect(await Promise.race([migrate(migrator), blocked()])).toEqual({ kind: "current" });
      // The control: a migration to run (the idempotent baseline, forgotten) does wait.
      await db.sql`delete from schema_history where version = 1`;
      const again = migrate(migrator);
      expect(await Promise.race([again, blocked()])).toBe("blocked on a table lock");
      await reader`rollback`;
      expect(await again).toEqual({ kind: "applied", names: ["0001_baseline"] });
    } finally {
      await reader`rollback`.catch(() => {});
      reader.release();
    }
  });
});

describe("a ledger that disagrees with the files", () => {
  test("an applied migration whose file changed, or one this release does not know: refused, with one line", async () => {
    const db = await emptyDatabase("refused");
    await migrate(db.sql);
    await db.sql`update schema_history set checksum = 'edited' where version = 2`;
    expect(await migrate(db.sql)).toEqual({ kind: "changed", names: ["0002_refunds_and_sequences"] });
    const started = await applySchema(poolOn(db, "charges-migrate-changed")).catch((e: unknown) => e);
    expect(started).toBeInstanceOf(StartupError);
    expect((started as Error).message).toMatch(/^refusing the database at DATABASE_URL: its applied migrations differ .*\(0002_refunds_and_sequences\)[^\n]*$/);

    await db.sql`update schema_history set checksum = ${(await readMigrations())[1]!.checksum} where version = 2`;
    // One past this release's last file: whatever number that is.
    const version = FILES.at(-1)!.version + 1;
    const unknown = `${String(version).padStart(4, "0")}_from_a_newer_release`;
    await db.sql`insert into schema_history (version, name, checksum) values (${version}, ${unknown}, 'x')`;
    expect(await migrate(db.sql)).toEqual({ kind: "unknown", names: [unknown] });
    const newer = await applySchema(poolOn(db, "charges-migrate-newer")).catch((e: unknown) => e);
    expect((newer as Error).message).toContain(`does not know (${unknown}): a newer release migrated it`);
    // Refused means untouched: nothing ran, the ledger is as it was.
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from schema_history`;
    expect(row?.n).toBe(FILES.length + 1);
  });

  test("the plan: renamed counts as changed, pending are the unrecorded ones in order, CRLF is the same text", () => {
    const one = migrationFromFile("0001_a.sql", "select 1;\n");
    const two = migrationFromFile("0002_b.sql", "select 2;\n");
    const row = (m: typeof one, name = m.name) => ({ version: m.version, name, checksum: m.checksum });
    expect(planMigrations([one, two], [])).toEqual({ kind: "run", pending: [one, two] });
    expect(planMigrations([one, two], [row(one)])).toEqual({ kind: "run", pending: [two] });
    expect(planMigrations([one, two], [row(one, "0001_renamed")])).toEqual({ kind: "changed", names: ["0001_renamed"] });
    expect(checksumOf("select 1;\r\n")).toBe(one.checksum);
    expect(() => migrationFromFile("3_misnamed.sql", "")).toThrow(/not named NNNN_name\.sql/);
  });
});

describe("two processes migrating at once", () => {
  test("both succeed, one applies, the other finds it done, each migration recorded once", async () => {
    const db = await emptyDatabase("concurrent");
    const [a, b] = [poolOn(db, "charges-migrate-a"), poolOn(db, "charges-migrate-b")];
    // Both are made to wait on the migration lock together, so they truly overlap.
    const holder = await db.sql.reserve();
    await holder`begin`;
    await holder`select pg_advisory_xact_lock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
    const both = Promise.all([migrate(a), migrate(b)]);
    try {
      await waitUntil(async () => {
        const [row] = await db.sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
           where datname = current_database() and application_name like 'charges-migrate-_' and wait_event_type = 'Lock'`;
        return row?.n === 2;
      }, 10_000, "both migrations to wait on the migration lock");
    } finally {
      await holder`rollback`;
      holder.release();
    }
    const outcomes = await both;
    expect(outcomes.map((o) => o.kind).sort()).toEqual(["applied", "current"]);
    const rows = await db.sql<{ version: number; n: number }[]>`
      select version, count(*)::int as n from schema_history group by version order by version`;
    expect([...rows]).toEqual(FILES.map((m) => ({ version: m.version, n: 1 })));
  });
});

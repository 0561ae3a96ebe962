// Forward-only schema migrations of migrations/, applied in order at start under one advisory lock,
// each recorded in schema_history with a checksum; a ledger that disagrees stops the process.
import { readdir, readFile } from "node:fs/promises";
import type { Sql, Tx } from "./db.ts";
import { sha256Hex } from "./sha256.ts";

// Any fixed 64-bit number unique to this project; taken for the whole migration.
export const MIGRATION_LOCK_ID = 7_310_422_118_001n;

// `0002_refunds_and_sequences.sql`: four digits, so that a listing sorts them as they run.
const MIGRATION_FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/** One row of the ledger: a migration some release applied to this database. */
interface LedgerRow {
  readonly version: number;
  /** The file's name without `.sql`. */
  readonly name: string;
  readonly checksum: string;
}

export interface Migration extends LedgerRow {
  readonly text: string;
}

export type MigrationOutcome =
  | { readonly kind: "applied"; readonly names: readonly string[] }
  | { readonly kind: "current" }
  /** Applied migrations whose file now has another name or other contents. */
  | { readonly kind: "changed"; readonly names: readonly string[] }
  /** A newer release migrated the database. */
  | { readonly kind: "unknown"; readonly names: readonly string[] };

type MigrationPlan = { readonly kind: "run"; readonly pending: readonly Migration[] } | Extract<MigrationOutcome, { kind: "changed" | "unknown" }>;

/** SHA-256 of the text with CRLF read as LF: a checkout with git's autocrlf is the same migration. */
export function checksumOf(text: string): string {
  return sha256Hex(text.replace(/\r\n/g, "\n"));
}

/** The migration a file of migrations/ holds; a bug (thrown) when its name does not fit. */
export function migrationFromFile(file: string, text: string): Migration {
  const match = MIGRATION_FILE.exec(file);
  if (!match) throw new Error(`bug: migrations/${file} is not named NNNN_name.sql`);
  return { version: Number(match[1]), name: file.slice(0, -".sql".length), text, checksum: checksumOf(text) };
}

/** The files of migrations/ in order; resolved when called, as edge runtimes fail a module that does so at load. */
export async function readMigrations(dir: URL = new URL("../../migrations/", import.meta.url)): Promise<Migration[]> {
  const files = (await readdir(dir)).sort();
  const migrations = await Promise.all(files.map(async (file) => migrationFromFile(file, await readFile(new URL(file, dir), "utf8"))));
  migrations.forEach((m, i) => {
    if (i > 0 && migrations[i - 1]!.version === m.version) throw new Error(`bug: two migrations numbered ${m.version} in migrations/`);
  });
  return migrations;
}

/** What to do, from this release's migrations and the database's ledger. Pure. */
export function planMigrations(known: readonly Migration[], ledger: readonly LedgerRow[]): MigrationPlan {
  const byVersion = new Map(known.map((m) => [m.version, m]));
  const unknown = ledger.filter((row) => !byVersion.has(row.version)).map((row) => row.name);
  if (unknown.length > 0) return { kind: "unknown", names: unknown };
  const changed = ledger.filter((row) => {
    const file = byVersion.get(row.version);
    return !file || file.name !== row.name || file.checksum !== row.checksum;
  });
  if (changed.length > 0) return { kind: "changed", names: changed.map((row) => row.name) };
  const done = new Set(ledger.map((row) => row.version));
  return { kind: "run", pending: known.filter((m) => !done.has(m.version)) };
}

/** A refusal as the one line a process prints before it exits. */
export function describeRefusal(outcome: Extract<MigrationOutcome, { kind: "changed" | "unknown" }>): string {
  if (outcome.kind === "unknown") {
    return `it has migrations this release does not know (${outcome.names.join(", ")}): a newer release migrated it; run that release or a later one`;
  }
  return `its applied migrations differ from this release's files in migrations/ (${outcome.names.join(", ")}): an applied migration is never edited; restore it and add a new one`;
}

// The pending migrations in one transaction under the advisory lock. An up-to-date database is only
// read: DDL's ACCESS EXCLUSIVE locks would queue behind, and then block, the running API and relays.
export async function migrate(sql: Sql, known?: readonly Migration[]): Promise<MigrationOutcome> {
  const migrations = known ?? (await readMigrations());
  const outcome = await sql.begin(async (tx) => {
    await unboundTimeouts(tx);
    await takeMigrationLock(tx);
    if (!(await ledgerExists(tx))) await createLedger(tx);
    const plan = planMigrations(migrations, await selectLedger(tx));
    if (plan.kind !== "run") return plan;
    for (const migration of plan.pending) {
      // A file of the program, never input: unsafe() runs its several statements in one go.
      await tx.unsafe(migration.text);
      await insertLedgerRow(tx, migration);
    }
    return plan.pending.length === 0 ? { kind: "current" } : { kind: "applied", names: plan.pending.map((m) => m.name) };
  });
  return outcome as MigrationOutcome;
}

/** The pool's statement and lock bounds are for requests: a migration waits and runs as long as it takes. */
async function unboundTimeouts(tx: Tx): Promise<void> {
  await tx`select set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)`;
}

async function takeMigrationLock(tx: Tx): Promise<void> {
  await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
}

/** Looked up rather than "create if not exists": on an up-to-date database nothing but reads. */
async function ledgerExists(tx: Tx): Promise<boolean> {
  const [row] = await tx<{ present: boolean }[]>`select to_regclass('schema_history') is not null as present`;
  return row?.present === true;
}

/** The ledger lives outside migrations/: it must exist before the first one is looked up. */
export async function createLedger(tx: Tx): Promise<void> {
  await tx`create table schema_history (
    version integer primary key,
    name text not null,
    checksum text not null,
    applied_at timestamptz not null default now()
  )`;
}

async function selectLedger(tx: Tx): Promise<LedgerRow[]> {
  return tx<LedgerRow[]>`select version, name, checksum from schema_history order by version`;
}

async function insertLedgerRow(tx: Tx, migration: Migration): Promise<void> {
  await tx`insert into schema_history (version, name, checksum) values (${migration.version}, ${migration.name}, ${migration.checksum})`;
}

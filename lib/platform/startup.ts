// What every process does alike at start: open its pool and migrate (or fail with one line),
// and one policy for rejections nobody handled.
import { createSql, describeDbError, isUnavailable, sqlState, type DbOptions, type Sql } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { describeRefusal, migrate, type MigrationOutcome } from "./migrations.ts";
import { ConfigError } from "./config.ts";
import type { Logger } from "./log.ts";
import { within } from "./within.ts";

/** The database could not be reached or migrated: the message is the one line to print. */
export class StartupError extends Error {
  override name = "StartupError";
}

// Applies the pending migrations and answers their names; a StartupError, pool closed, when the
// database cannot be reached or migrated, or its ledger disagrees with this release.
export async function applySchema(sql: Sql): Promise<readonly string[]> {
  let outcome: MigrationOutcome;
  try {
    await firstContact(sql);
    outcome = await migrate(sql);
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new StartupError(`cannot reach or migrate the database at DATABASE_URL: ${describeDbError(error)}${poolerHint(sql, error)}`);
  }
  if (outcome.kind === "applied") return outcome.names;
  if (outcome.kind === "current") return [];
  await sql.end({ timeout: 1 }).catch(() => {});
  throw new StartupError(`refusing the database at DATABASE_URL: ${describeRefusal(outcome)}`);
}

function poolerHint(sql: Sql, error: unknown): string {
  // PgBouncer refuses a startup parameter it does not track (statement_timeout) with 08P01.
  if (sqlState(error) !== "08P01" || isTransactionPooled(sql)) return "";
  return " (if DATABASE_URL is a pooler in transaction mode, such as PgBouncer's, set DATABASE_POOLER=transaction)";
}

// postgres.js 3.4.9 tries a host list none of whose servers takes the connection for good
// (porsager/postgres#1174): a starting process waits this long, room for a failover, and says so.
const FIRST_CONTACT_TIMEOUT_MS = 30_000;

async function firstContact(sql: Sql): Promise<void> {
  const answered = await within(sql`select 1`.then(() => true), FIRST_CONTACT_TIMEOUT_MS);
  if (!answered) throw new Error(`none of its hosts took a connection within ${FIRST_CONTACT_TIMEOUT_MS / 1000} s`);
}

/** A pool on `url` with the migrations applied; a StartupError (pool closed) when either fails. */
export async function openDatabase(url: string, options: DbOptions): Promise<Sql> {
  const sql = createSql(url, options);
  await applySchema(sql);
  return sql;
}

// For entrypoints: a StartupError printed as `<component>: <line>`, a ConfigError as
// `configuration error: <line>`, and exit 1; anything else is rethrown.
export function exitOnStartupError(component: string): (error: unknown) => never {
  return (error) => {
    const prefix =
      error instanceof StartupError ? component : error instanceof ConfigError ? "configuration error" : undefined;
    if (prefix === undefined) throw error;
    console.error(`${prefix}: ${(error as Error).message}`);
    process.exit(1);
  };
}

// postgres.js 3.4.9 can reject internal promises nobody awaits when a connection dies: the pools
// survive that, so it is logged. Anything else unhandled is a bug, and the process stops.
export function stopOnUnhandledRejection(log: Logger): void {
  process.on("unhandledRejection", (reason) => {
    if (isUnavailable(reason)) return log.warn("database connection lost", { error: describeDbError(reason) });
    log.error("unhandled rejection", { error: describeDbError(reason) });
    process.exit(1);
  });
}

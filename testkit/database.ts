// Throwaway databases for tests, chaos scenarios and benchmarks: created on a server the
// caller names, migrations applied, dropped (with any backend still on it) when done.
import { createSql, type Sql } from "../lib/platform/db.ts";
import { describeRefusal, migrate } from "../lib/platform/migrations.ts";
import { waitUntil } from "./wait.ts";
import { TEST_TENANT } from "./auth.ts";

export interface ScratchDatabase {
  readonly name: string;
  readonly url: string;
  /** A pool on the new database; postgres.js connects lazily, so an unused one costs nothing. */
  readonly sql: Sql;
  drop(): Promise<void>;
}

export interface ScratchOptions {
  /** Pool size of `sql`. */
  readonly max?: number;
  /** Apply migrations/ (default true); false leaves it to the processes under test. */
  readonly migrate?: boolean;
  readonly applicationName?: string;
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** `<prefix>_<label>_<random>`, from [a-z0-9_] only: identifiers cannot be query parameters. */
export function scratchName(prefix: string, label: string): string {
  const clean = (s: string) => s.replace(/[^a-z0-9]/gi, "_").toLowerCase();
  return `${clean(prefix)}_${clean(label)}_${crypto.randomUUID().slice(0, 8)}`;
}

export async function createScratchDatabase(adminUrl: string, name: string, options: ScratchOptions = {}): Promise<ScratchDatabase> {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`bug: unsafe database name ${JSON.stringify(name)}`);
  const admin = createSql(adminUrl, { max: 1, applicationName: "charges-scratch-admin" });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end({ timeout: 2 });
  }
  const url = withDatabase(adminUrl, name);
  const sql = createSql(url, { max: options.max ?? 4, applicationName: options.applicationName ?? "charges-scratch" });
  if (options.migrate ?? true) await migrateScratch(sql);
  return {
    name,
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 2 });
      const dropper = createSql(adminUrl, { max: 1, applicationName: "charges-scratch-admin" });
      try {
        await dropper.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await dropper.end({ timeout: 2 });
      }
    },
  };
}

/** A brand-new database can only be refused by a bug in migrations/: thrown. */
async function migrateScratch(sql: Sql): Promise<void> {
  const outcome = await migrate(sql);
  if (outcome.kind === "changed" || outcome.kind === "unknown") throw new Error(`bug: ${describeRefusal(outcome)}`);
}

export interface HeldKey {
  /** Rolls the holding transaction back, letting the held request go on. Idempotent. */
  release(): Promise<void>;
}

/**
 * Holds a POST /charges request for `key` inside its statement, deterministically: an
 * uncommitted key row with the same (tenant, key, endpoint) in our own open transaction. The API's
 * statement takes the key's advisory lock, then its insert queues behind our row on the
 * unique index, so every other request for the key answers 409 while we hold.
 */
export async function holdKey(sql: Sql, key: string, endpoint = "POST /charges", tenant: string = TEST_TENANT): Promise<HeldKey> {
  const holder = await sql.reserve();
  try {
    await holder`begin`;
    await holder`insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at)
                 values (${tenant}, ${key}, ${endpoint}, 'held', 'STARTED', now() + interval '1 hour')`;
  } catch (error) {
    holder.release();
    throw error;
  }
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      await holder`rollback`.catch(() => {});
      holder.release();
    },
  };
}

/** The pid of a backend of `appName` on this database that waits on a lock, if any. */
export async function backendWaitingOnLock(sql: Sql, appName: string): Promise<number | undefined> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity
     where datname = current_database() and application_name = ${appName} and wait_event_type = 'Lock'`;
  return rows[0]?.pid;
}

/** Waits, by polling pg_stat_activity, until a backend of `appName` waits on a lock; its pid. */
export function waitForBackendOnLock(sql: Sql, appName: string, timeoutMs = 10_000): Promise<number> {
  return waitUntil(() => backendWaitingOnLock(sql, appName), timeoutMs, `a backend of ${appName} to wait on a lock`);
}

/** Backend pids of `appName` on this database. */
export async function backendsOf(sql: Sql, appName: string): Promise<number[]> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity where datname = current_database() and application_name = ${appName}`;
  return rows.map((r) => r.pid);
}

/** pg_terminate_backend for each pid; how many were terminated. */
export async function terminateBackends(sql: Sql, pids: readonly number[]): Promise<number> {
  if (pids.length === 0) return 0;
  const rows = await sql<{ pid: number }[]>`
    select pid from unnest(${pids as number[]}::int[]) as pid where pg_terminate_backend(pid)`;
  return rows.length;
}

/**
 * An empty database owned by a login role of its own, for the faults a server's refusals
 * make: the processes under test connect as the role (`url`) and apply the schema, and
 * `refuse()` makes the server answer each of the role's connects with 53300, as a server
 * at max_connections does (a role's limit, since superusers are held to none). `sql` is the
 * admin's pool on that database.
 */
export interface RoleDatabase extends ScratchDatabase {
  readonly role: string;
  /** At most `limit` connections of the role at once, or no limit (null). */
  limitConnections(limit: number | null): Promise<void>;
  /** New connections refused (53300) and the role's backends terminated. */
  refuse(): Promise<void>;
  /** New connections accepted again. */
  accept(): Promise<void>;
  /** The role's backends on the server now. */
  backends(): Promise<number>;
}

export async function createRoleDatabase(adminUrl: string, label: string): Promise<RoleDatabase> {
  const role = scratchName("t", label);
  const admin = createSql(adminUrl, { max: 1, applicationName: "charges-scratch-admin" });
  await admin.unsafe(`create role ${role} login`);
  const db = await createScratchDatabase(adminUrl, scratchName("t", label), { migrate: false, max: 2 });
  await admin.unsafe(`alter database ${db.name} owner to ${role}`);
  const url = new URL(db.url);
  url.username = role;
  url.password = "";
  const limitConnections = async (limit: number | null): Promise<void> => {
    // A role name and an integer: neither can be a parameter of ALTER ROLE.
    if (limit !== null && !Number.isSafeInteger(limit)) throw new Error(`bug: connection limit ${limit}`);
    await admin.unsafe(`alter role ${role} connection limit ${limit ?? -1}`);
  };
  return {
    ...db,
    role,
    url: url.toString(),
    limitConnections,
    async refuse() {
      await limitConnections(0);
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where usename = ${role}`;
    },
    accept: () => limitConnections(null),
    async backends() {
      const [row] = await admin<{ n: number }[]>`select count(*)::int as n from pg_stat_activity where usename = ${role}`;
      return row?.n ?? 0;
    },
    async drop() {
      await db.drop();
      await admin.unsafe(`drop role if exists ${role}`);
      await admin.end({ timeout: 2 });
    },
  };
}

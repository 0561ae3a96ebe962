// Pools behind a pooler in transaction mode (DATABASE_POOLER=transaction), where nothing tied to a
// session holds: prepared statements, startup parameters, LISTEN and session locks.
import type { Config } from "./config.ts";
import type { Sql, Tx } from "./sql-types.ts";
import { maskUrl } from "./redact.ts";

/** Unset keeps the server's. */
interface SessionBounds {
  readonly statementTimeoutMs?: number;
  readonly lockTimeoutMs?: number;
}

const pooledPools = new WeakSet<Sql>();

/** Whether `sql` is a pool behind a transaction pooler: its sessions keep nothing between transactions. */
export function isTransactionPooled(sql: Sql): boolean {
  return pooledPools.has(sql);
}

/** `sql`, known as transaction-pooled, every transaction of which opens with `bounds`. */
export function transactionPooled(sql: Sql, bounds: SessionBounds): Sql {
  const pooled = bounds.statementTimeoutMs === undefined && bounds.lockTimeoutMs === undefined ? sql : boundEachTransaction(sql, bounds);
  pooledPools.add(pooled);
  return pooled;
}

// `sql` whose begin() sets the bounds for the transaction, not awaited (it leaves with the first
// statement): postgres.js fails the transaction with the first error of any of its statements.
function boundEachTransaction(sql: Sql, bounds: SessionBounds): Sql {
  const statement = bounds.statementTimeoutMs?.toString() ?? null;
  const lock = bounds.lockTimeoutMs?.toString() ?? null;
  const setBounds = (tx: Tx): void =>
    void tx`select set_config('statement_timeout', coalesce(${statement}::text, current_setting('statement_timeout')), true),
                   set_config('lock_timeout', coalesce(${lock}::text, current_setting('lock_timeout')), true)`
      .execute()
      .catch(() => {});
  const begin = (...args: unknown[]): unknown => {
    const work = args.pop() as (tx: Tx) => unknown;
    return Reflect.apply(sql.begin, sql, [...args, (tx: Tx) => (setBounds(tx), work(tx))]);
  };
  return new Proxy(sql, {
    get: (target, key, receiver) => (key === "begin" ? begin : Reflect.get(target, key, receiver)),
  });
}

/** What a process needs a Postgres session of its own for: LISTEN (the relay), advisory locks (in words). */
interface SessionUses {
  readonly listen?: { readonly pollMs: number };
  readonly locks?: string;
}

type DatabaseAccess = Pick<Config, "databaseUrl" | "databasePooler" | "databaseDirectUrl">;

/** The process's start-up line on how it reaches Postgres, URLs masked. */
export function databaseModeLine(config: DatabaseAccess, uses: SessionUses = {}): { msg: string; fields: Record<string, string | number> } {
  const fields: Record<string, string | number> = { pooler: config.databasePooler, databaseUrl: maskUrl(config.databaseUrl) };
  if (config.databasePooler === "none") return { msg: "database: direct connections (DATABASE_POOLER=none)", fields };
  const parts = ["database: via a pooler in transaction mode (unnamed statements, time bounds set per transaction)"];
  const direct = config.databaseDirectUrl;
  if (direct !== undefined) {
    fields.directUrl = maskUrl(direct);
    const sessions = [...(uses.listen ? ["LISTEN"] : []), ...(uses.locks !== undefined ? [uses.locks] : [])];
    if (sessions.length > 0) parts.push(`${sessions.join(" and ")} via DATABASE_DIRECT_URL`);
  } else {
    if (uses.listen) parts.push(`polling the outbox every ${uses.listen.pollMs} ms (no LISTEN without DATABASE_DIRECT_URL)`);
    if (uses.locks !== undefined) parts.push(`${uses.locks} per transaction`);
  }
  return { msg: parts.join("; "), fields };
}

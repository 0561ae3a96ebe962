// Pools behind a connection pooler in transaction mode (PgBouncer's pool_mode = transaction,
// DATABASE_POOLER=transaction). There each transaction may run on another server connection,
// one that other clients use between our transactions, so nothing tied to a session holds:
//  - a named prepared statement is unknown on the next server connection (26000): the pool
//    sends unnamed ones (db.ts);
//  - the pooler refuses startup parameters it does not track (PgBouncer: 08P01 for
//    statement_timeout): the pool sends none but application_name (db.ts), and every
//    transaction sets its bounds itself, as set_config(..., true) (below);
//  - LISTEN and session advisory locks would belong to whichever server connection ran them:
//    the pool says it is pooled (isTransactionPooled), so that they go over
//    DATABASE_DIRECT_URL or work per transaction (relay LISTEN, job-lock.ts).
import type { DatabasePooler } from "./config.ts";
import type { Sql, Tx } from "./sql-types.ts";
import { maskUrl } from "./redact.ts";

/** The bounds a direct connection gets as startup parameters; unset keeps the server's. */
export interface SessionBounds {
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

/**
 * `sql` whose begin() sets the bounds first, for the transaction only. The setting is sent
 * without being awaited, so it leaves in the same flight as the transaction's first statement
 * (no round trip of its own); postgres.js fails the transaction with the first error of any of
 * its statements, this one's included.
 */
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

/** What a process needs a Postgres session of its own for, named in its start-up line. */
export interface SessionUses {
  /** The relay: it LISTENs, or polls every `pollMs` where it cannot. */
  readonly listen?: { readonly pollMs: number };
  /** The session advisory locks it takes, in words ("ops job locks"). */
  readonly locks?: string;
}

interface DatabaseAccess {
  readonly databaseUrl: string;
  readonly databasePooler: DatabasePooler;
  readonly databaseDirectUrl: string | undefined;
}

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

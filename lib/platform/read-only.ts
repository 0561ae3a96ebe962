// A server that refuses writes (SQLSTATE 25006 read_only_sql_transaction) while its sessions
// stay open: a primary fenced before a switchover (default_transaction_read_only turned on),
// or a standby a pool reached (a URL without target_session_attrs). Every write on those
// sessions fails for as long as they live, so the pool must leave them: a new connection
// tries the hosts in order (database-url.ts) and finds the server that accepts writes. The
// failed write itself is answered as the database being unavailable (db.ts: a 503, a back-off).
import { sqlState, type Sql } from "./db.ts";

export const READ_ONLY_SQL_TRANSACTION = "25006";

export function isReadOnly(error: unknown): boolean {
  return sqlState(error) === READ_ONLY_SQL_TRANSACTION;
}

// At most one drop of a pool at a time and one a second: a server that stays read-only (the
// only one listed) then costs each connection one reconnect a second, not one per refused write.
const DROP_INTERVAL_MS = 1000;
const lastDrop = new WeakMap<Sql, number>();
const dropping = new WeakSet<Sql>();

/**
 * After a 25006: ends every session of `sql`'s pool that is on a read-only server, and none
 * on a writable one. postgres.js has no call that closes one connection, so the server does
 * it: one statement per connection the pool may hold, which postgres.js hands to an idle
 * connection first, then to an unopened one, then behind a busy one. On a read-only server
 * each sets its session's idle_session_timeout (Postgres 14 and later) to 1 ms: the server
 * ends the session as soon as it is idle, with no statement of ours in flight. Ending it from
 * inside a statement (pg_terminate_backend of its own pid) would leave that statement's row
 * in postgres.js 3.4.9's connection state, handed to the next query after the reconnect. A
 * connection left out (opening meanwhile) is dropped after its own first refused write.
 */
export async function dropReadOnlyConnections(sql: Sql): Promise<void> {
  const now = performance.now();
  if (dropping.has(sql) || now - (lastDrop.get(sql) ?? Number.NEGATIVE_INFINITY) < DROP_INTERVAL_MS) return;
  lastDrop.set(sql, now);
  dropping.add(sql);
  try {
    await Promise.all(Array.from({ length: sql.options.max }, () => endWhenIdleIfReadOnly(sql).catch(() => {})));
  } finally {
    dropping.delete(sql);
  }
}

// The shortest idle_session_timeout: the session ends once this statement has been answered.
const END_WHEN_IDLE_MS = "1";

function endWhenIdleIfReadOnly(sql: Sql): Promise<unknown> {
  return sql`
    select set_config('idle_session_timeout', ${END_WHEN_IDLE_MS}, false)
     where current_setting('transaction_read_only') = 'on'`;
}

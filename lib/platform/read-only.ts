// A server that refuses writes (25006) while its sessions stay open (a primary fenced before a
// switchover, a standby): the pool must leave them, and a new connection finds the writable host.
import { sqlState, type Sql } from "./db.ts";

export function isReadOnly(error: unknown): boolean {
  return sqlState(error) === "25006";
}

// One drop of a pool at a time and a second: a server that stays read-only costs a reconnect a
// second per connection, not one per refused write.
const DROP_INTERVAL_MS = 1000;
const lastDrop = new WeakMap<Sql, number>();
const dropping = new WeakSet<Sql>();

// postgres.js cannot close one connection, so each gets idle_session_timeout (PG 14+) = 1 ms where the
// session is read-only (pg_terminate_backend of its own pid would leave a row in postgres.js 3.4.9's
// state for the next query).
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

function endWhenIdleIfReadOnly(sql: Sql): Promise<unknown> {
  return sql`
    select set_config('idle_session_timeout', '1', false)
     where current_setting('transaction_read_only') = 'on'`;
}

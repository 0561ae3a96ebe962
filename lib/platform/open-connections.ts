// A pool's open connections, counted through postgres.js's public callbacks, since it exports
// no count: `debug` names the connection each statement is sent on, and `onclose` the
// connection that closed (idle or too old, lost, or ended). The pool opens a connection only
// to send a statement, so a connection is counted from its first statement to its close. A
// close of a connection that never got as far as a statement (a connect that failed) is not
// in the set and changes nothing.
//
// Not for a pool that LISTENs: postgres.js gives LISTEN a client of its own, built from the
// same options with its own `onclose`, so its connection would be counted and never
// uncounted. The relay LISTENs through a pool of its own (relay/start.ts).
import type { Sql } from "./sql-types.ts";

export interface OpenCounter {
  /** postgres.js's `debug` option: a statement is being sent on `connection`. */
  readonly debug: (connection: number) => void;
  /** postgres.js's `onclose` option. */
  readonly onclose: (connection: number) => void;
  readonly open: () => number;
}

export function createOpenCounter(): OpenCounter {
  const open = new Set<number>();
  return {
    debug: (connection) => void open.add(connection),
    onclose: (connection) => void open.delete(connection),
    open: () => open.size,
  };
}

const counters = new WeakMap<Sql, OpenCounter>();

export function trackOpen(sql: Sql, counter: OpenCounter): Sql {
  counters.set(sql, counter);
  return sql;
}

/** The connections `sql` holds open now; undefined for a pool created without `countOpen`. */
export function openConnections(sql: Sql): number | undefined {
  return counters.get(sql)?.open();
}

// The postgres.js client and the classification of database errors (migrations: migrations.ts).
import postgres from "postgres";
import { within } from "./within.ts";
import { clientTarget } from "./database-url.ts";
import { POOL_WAIT_TIMEOUT, REQUEST_DEADLINE } from "./pool-gate.ts";
import type { DatabasePooler } from "./config.ts";
import { transactionPooled } from "./pooler.ts";
import { createOpenCounter, trackOpen } from "./open-connections.ts";

import type { Sql } from "./sql-types.ts";

export type { Sql, Tx } from "./sql-types.ts";

export interface DbOptions {
  /** Pool size. The API wants several (one per in-flight request); the relay a few. */
  readonly max?: number;
  readonly applicationName?: string;
  /**
   * Server-side bound on every statement of the pool (statement_timeout, SQLSTATE 57014 when
   * it trips). Unset: the server's setting. Sent as a startup parameter: no cost per query.
   */
  readonly statementTimeoutMs?: number;
  /** Server-side bound on every lock wait (lock_timeout, SQLSTATE 55P03). Unset: the server's setting. */
  readonly lockTimeoutMs?: number;
  /**
   * A client that lives for one request (the edge worker): no named prepared statements (each
   * would be parsed on a connection used once) and no type lookup when it connects (a round
   * trip that only array columns need, and the API has none).
   */
  readonly singleUse?: boolean;
  /**
   * Count the pool's open connections (openConnections(), db_client_connections_open). Not for
   * a pool that LISTENs (open-connections.ts). Costs postgres.js's debug mode: a stack captured
   * per statement.
   */
  readonly countOpen?: boolean;
  /**
   * "transaction": the URL is a pooler in transaction mode (DATABASE_POOLER): no named prepared
   * statements, no startup parameters but application_name, and the bounds above set by each
   * transaction instead (pooler.ts). Default "none".
   */
  readonly pooler?: DatabasePooler;
}

// A connect that has not answered in this time is reported as "database unreachable"
// instead of hanging the request; short enough to answer a client within its own timeout.
const CONNECT_TIMEOUT_S = 5;
// Idle pool connections are closed after this long so a quiet process holds no backends.
const IDLE_TIMEOUT_S = 60;

export function createSql(url: string, options: DbOptions = {}): Sql {
  const pooled = options.pooler === "transaction";
  // A list of hosts and target_session_attrs as libpq reads them (database-url.ts).
  const { url: clientUrl, ...target } = clientTarget(url);
  const counter = options.countOpen ? createOpenCounter() : undefined;
  const sql = postgres(clientUrl, {
    ...target,
    max: options.max ?? 10,
    connect_timeout: CONNECT_TIMEOUT_S,
    idle_timeout: IDLE_TIMEOUT_S,
    // Named prepared statements: the hot path parses each statement once per connection.
    prepare: !options.singleUse && !pooled,
    fetch_types: !options.singleUse,
    onnotice: () => {},
    ...(counter && { debug: counter.debug, onclose: counter.onclose }),
    connection: {
      application_name: options.applicationName ?? "charges",
      ...(!pooled && options.statementTimeoutMs !== undefined && { statement_timeout: options.statementTimeoutMs }),
      ...(!pooled && options.lockTimeoutMs !== undefined && { lock_timeout: options.lockTimeoutMs }),
    },
  }) as unknown as Sql;
  const client = pooled ? transactionPooled(sql, options) : sql;
  return counter ? trackOpen(client, counter) : client;
}

// SQLSTATE classes that mean "the database cannot serve this now, try again later":
// 08 connection exception, 53 insufficient resources, 57 operator intervention
// (admin shutdown, query canceled, cannot connect now), 58 system error, the two
// retryable transaction failures, and 25006: a write refused by a server that is read-only,
// a primary being failed over (its pool then leaves it: read-only.ts).
const UNAVAILABLE_CLASSES = ["08", "53", "57", "58"];
const UNAVAILABLE_STATES = new Set(["40001", "40P01", "55P03", "25P03", "25006"]);
// postgres.js's own codes for a connection it lost or could not open, Node's socket codes,
// and the pool gate's refusals (nothing was sent).
const UNAVAILABLE_CLIENT_CODES = new Set([
  POOL_WAIT_TIMEOUT,
  REQUEST_DEADLINE,
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ConnectionRefused",
  "ConnectionClosed",
]);

/** True when the error is the database being away or overloaded, not a bug. */
export function isUnavailable(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code !== "string") return false;
  if (UNAVAILABLE_CLIENT_CODES.has(code) || UNAVAILABLE_STATES.has(code)) return true;
  return /^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_CLASSES.includes(code.slice(0, 2));
}

// A time bound tripped: statement_timeout (57014 query_canceled), lock_timeout (55P03
// lock_not_available), or the pool gate refused before sending anything. All are also
// isUnavailable; this only lets an answer say which kind of unavailable it was.
const TIME_BOUND_CODES = new Set(["57014", "55P03", POOL_WAIT_TIMEOUT, REQUEST_DEADLINE]);

export function isTimeBound(error: unknown): boolean {
  const code = sqlState(error);
  return code !== undefined && TIME_BOUND_CODES.has(code);
}

// The connection under a statement went away, not the statement failing: closed or ended
// by the client library, reset, or terminated by the server (admin or crash shutdown,
// cannot connect now, idle session timeout, any class 08 connection exception). A new
// connection may work.
const CONNECTION_LOST_CODES = new Set(["CONNECTION_CLOSED", "CONNECTION_DESTROYED", "CONNECTION_ENDED", "ECONNRESET", "EPIPE", "ETIMEDOUT"]);
const CONNECTION_LOST_STATES = new Set(["57P01", "57P02", "57P03", "57P05"]);

export function isConnectionLost(error: unknown): boolean {
  const code = sqlState(error);
  return code !== undefined && (CONNECTION_LOST_CODES.has(code) || CONNECTION_LOST_STATES.has(code) || code.startsWith("08"));
}

export const UNIQUE_VIOLATION = "23505";

export function sqlState(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

/** One line for an operator: no SQL text, no stack. */
export function describeDbError(error: unknown): string {
  const code = sqlState(error);
  const message = error instanceof Error ? error.message : String(error);
  return code ? `${code}: ${message}` : message;
}

/** For readiness probes: whether the database answers `select 1` within `timeoutMs`. */
export async function probeDatabase(sql: Sql, timeoutMs: number): Promise<{ up: boolean; error?: string }> {
  const probe = sql`select 1`.then(
    () => ({ up: true }),
    (error: unknown) => ({ up: false, error: describeDbError(error) }),
  );
  return (await within(probe, timeoutMs)) ?? { up: false, error: `no answer within ${timeoutMs} ms` };
}

// The postgres.js client, its open-connection count, and the classification of database errors.
import postgres from "postgres";
import { within } from "./within.ts";
import { clientTarget } from "./database-url.ts";
import { POOL_WAIT_TIMEOUT, REQUEST_DEADLINE } from "./pool-gate.ts";
import type { DatabasePooler } from "./config.ts";
import { transactionPooled } from "./pooler.ts";
import type { Sql } from "./sql-types.ts";

export type { Sql, Tx } from "./sql-types.ts";

// The timeouts are startup parameters (unset: the server's). `singleUse` (the edge worker): no named
// prepared statements, no type lookup at connect. `countOpen` costs a stack captured per statement.
export interface DbOptions {
  readonly max?: number;
  readonly applicationName?: string;
  readonly statementTimeoutMs?: number;
  readonly lockTimeoutMs?: number;
  readonly singleUse?: boolean;
  readonly countOpen?: boolean;
  readonly pooler?: DatabasePooler;
}

const openCounts = new WeakMap<Sql, Set<number>>();

export function createSql(url: string, options: DbOptions = {}): Sql {
  const pooled = options.pooler === "transaction";
  // A list of hosts and target_session_attrs as libpq reads them (database-url.ts).
  const { url: clientUrl, ...target } = clientTarget(url);
  // postgres.js exports no count: `debug` names the connection each statement goes on, `onclose`
  // the one that closed. Not for a pool that LISTENs: postgres.js gives LISTEN a client of its
  // own with the same options, whose connection would be counted and never uncounted.
  const open = options.countOpen ? new Set<number>() : undefined;
  const sql = postgres(clientUrl, {
    ...target,
    max: options.max ?? 10,
    // Seconds: an unanswered connect fails within a client's own timeout; a quiet process holds no backends.
    connect_timeout: 5,
    idle_timeout: 60,
    // Named prepared statements: the hot path parses each statement once per connection.
    prepare: !options.singleUse && !pooled,
    fetch_types: !options.singleUse,
    onnotice: () => {},
    ...(open && {
      debug: (connection: number) => void open.add(connection),
      onclose: (connection: number) => void open.delete(connection),
    }),
    connection: {
      application_name: options.applicationName ?? "charges",
      ...(!pooled && options.statementTimeoutMs !== undefined && { statement_timeout: options.statementTimeoutMs }),
      ...(!pooled && options.lockTimeoutMs !== undefined && { lock_timeout: options.lockTimeoutMs }),
    },
  }) as unknown as Sql;
  const client = pooled ? transactionPooled(sql, options) : sql;
  if (open) openCounts.set(client, open);
  return client;
}

/** The connections `sql` holds open now; undefined for a pool created without `countOpen`. */
export function openConnections(sql: Sql): number | undefined {
  return openCounts.get(sql)?.size;
}

// Try again later: SQLSTATE classes 08 connection, 53 resources, 57 operator intervention, 58
// system; the retryable transaction failures; 25006, a primary being failed over (read-only.ts).
const UNAVAILABLE_CLASSES = ["08", "53", "57", "58"];
const UNAVAILABLE_STATES = new Set(["40001", "40P01", "55P03", "25P03", "25006"]);
// postgres.js's codes for a connection lost or never opened, Node's socket codes, and the pool
// gate's refusals (nothing was sent).
const UNAVAILABLE_CLIENT_CODES = new Set([POOL_WAIT_TIMEOUT, REQUEST_DEADLINE, "CONNECTION_CLOSED", "CONNECTION_ENDED",
  "CONNECTION_DESTROYED", "CONNECT_TIMEOUT", "ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND",
  "EAI_AGAIN", "EHOSTUNREACH", "ConnectionRefused", "ConnectionClosed"]);

/** True when the error is the database being away or overloaded, not a bug. */
export function isUnavailable(error: unknown): boolean {
  const code = sqlState(error);
  if (code === undefined) return false;
  if (UNAVAILABLE_CLIENT_CODES.has(code) || UNAVAILABLE_STATES.has(code)) return true;
  return /^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_CLASSES.includes(code.slice(0, 2));
}

// statement_timeout (57014), lock_timeout (55P03), or the pool gate's refusals: all also
// isUnavailable; this lets an answer say which kind of unavailable it was.
const TIME_BOUND_CODES = new Set(["57014", "55P03", POOL_WAIT_TIMEOUT, REQUEST_DEADLINE]);

export function isTimeBound(error: unknown): boolean {
  const code = sqlState(error);
  return code !== undefined && TIME_BOUND_CODES.has(code);
}

// The connection under a statement went away (closed by the client library, reset, terminated by
// the server, any class 08), not the statement failing: a new connection may work.
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

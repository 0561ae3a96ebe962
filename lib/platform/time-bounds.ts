// The API's and the relay's time bounds, read by config.ts's loadConfig: how long a statement,
// a lock wait, a pool wait, a request or a stop may take.
import { ConfigError, integer, type Env } from "./config-values.ts";

/** How long the API lets one request wait on the database before answering 503. */
export interface ApiTimeBounds {
  readonly statementTimeoutMs: number;
  readonly lockTimeoutMs: number;
  readonly poolWaitMs: number;
  readonly requestTimeoutMs: number;
}

/** How long one relay statement may run or wait for a lock before it fails (and the relay backs off), and how long a stop may take. */
export interface RelayTimeBounds {
  readonly statementTimeoutMs: number;
  readonly lockTimeoutMs: number;
  /** From SIGTERM: the batches in flight get this long to finish, then the process exits anyway. */
  readonly shutdownGraceMs: number;
}

// The relay's bounds are longer than the API's: no client waits on it, so a slow statement that
// would finish is worth waiting for, and a stalled one must still free its lane's connection.
// Its statements (a claim, the marks, an ops job's 1,000-row delete or reconciliation scan)
// take milliseconds on a healthy database: 30 s only trips on a stalled one.
const RELAY_STATEMENT_TIMEOUT_MS = 30_000;
// A claim queued behind DDL (a migration's ALTER TABLE, VACUUM FULL) waits this long, then fails
// and the relay backs off and tries again: a short ALTER passes unnoticed, a lock held for
// minutes shows in the logs as lock timeouts instead of a silent stall.
const RELAY_LOCK_TIMEOUT_MS = 10_000;
// A batch in flight finishes within its publish timeout (10 s) and its mark; a stop that takes
// longer waits for what is not coming (no database host that qualifies, a broker that took
// the publishes and went silent). What it leaves unmarked stays pending and is published
// again, so the process may go: 20 s, inside the 30 s an orchestrator usually waits before
// SIGKILL.
const RELAY_SHUTDOWN_GRACE_MS = 20_000;
const MAX_RELAY_BOUND_MS = 3_600_000;

export function relayTimeBounds(env: Env): RelayTimeBounds {
  return Object.freeze({
    statementTimeoutMs: integer(env, "RELAY_STATEMENT_TIMEOUT_MS", RELAY_STATEMENT_TIMEOUT_MS, 1, MAX_RELAY_BOUND_MS),
    lockTimeoutMs: integer(env, "RELAY_LOCK_TIMEOUT_MS", RELAY_LOCK_TIMEOUT_MS, 1, MAX_RELAY_BOUND_MS),
    shutdownGraceMs: integer(env, "RELAY_SHUTDOWN_GRACE_MS", RELAY_SHUTDOWN_GRACE_MS, 1, MAX_RELAY_BOUND_MS),
  });
}

// The API's time bounds. Every bound trips long before a client's own timeout (30 s and more
// for common HTTP clients and load balancers), so the client gets a 503 it can act on, not
// a dropped connection; and far above what a healthy database takes.
// A charge is one statement taking milliseconds: 5 s only trips on a stalled database.
const API_STATEMENT_TIMEOUT_MS = 5_000;
// The statement's lock waits are sub-millisecond unless DDL, VACUUM FULL or LOCK TABLE holds a
// table: 2 s says "a lock queue" (55P03) sooner than the statement bound would.
const API_LOCK_TIMEOUT_MS = 2_000;
// Under plain overload a connection frees within milliseconds; 2 s of waiting means every
// connection is held by stalled statements, and queueing longer only grows the pile.
const API_POOL_WAIT_MS = 2_000;
// The whole answer, resends after a lost connection included: room for one full pool wait
// plus one full statement (7 s), and a worst case of 10 s, well under a client's timeout.
const API_REQUEST_TIMEOUT_MS = 10_000;
const MAX_BOUND_MS = 3_600_000;

export function apiTimeBounds(env: Env): ApiTimeBounds {
  const bounds = {
    statementTimeoutMs: integer(env, "API_STATEMENT_TIMEOUT_MS", API_STATEMENT_TIMEOUT_MS, 1, MAX_BOUND_MS),
    lockTimeoutMs: integer(env, "API_LOCK_TIMEOUT_MS", API_LOCK_TIMEOUT_MS, 1, MAX_BOUND_MS),
    poolWaitMs: integer(env, "API_POOL_WAIT_MS", API_POOL_WAIT_MS, 1, MAX_BOUND_MS),
    requestTimeoutMs: integer(env, "API_REQUEST_TIMEOUT_MS", API_REQUEST_TIMEOUT_MS, 1, MAX_BOUND_MS),
  };
  // A statement starts only while it can still end within the request's deadline.
  if (bounds.requestTimeoutMs < bounds.statementTimeoutMs + bounds.poolWaitMs) {
    throw new ConfigError(
      `API_REQUEST_TIMEOUT_MS must be at least API_STATEMENT_TIMEOUT_MS + API_POOL_WAIT_MS (${bounds.statementTimeoutMs + bounds.poolWaitMs}), got ${bounds.requestTimeoutMs}`,
    );
  }
  return Object.freeze(bounds);
}

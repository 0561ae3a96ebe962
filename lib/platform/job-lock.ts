// One runner per periodic job across every process sharing the database, and the bounded
// batch loop the retention jobs use.
import { isConnectionLost, type Sql } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { transaction } from "./tx.ts";
import { within } from "./within.ts";

export type Locked<T> = { readonly ran: true; readonly value: T } | { readonly ran: false };

// postgres.js 3.4.9 can leave reserve() waiting for good once connections of its pool were
// killed (the relay's ops loop then never ended, nor did SIGTERM: test/relay-outages.test.ts).
// The wait is bounded, and given up at once when the caller stops.
const RESERVE_TIMEOUT_MS = 5000;

/** A reserved connection; throws when the wait for one ran out or `signal` aborted it. */
async function reserveWithin(sql: Sql, ms: number, signal: AbortSignal | undefined): Promise<Awaited<ReturnType<Sql["reserve"]>>> {
  const reserving = sql.reserve();
  const conn = await within(reserving, ms, signal);
  if (conn) return conn;
  // A connection granted after all goes straight back to the pool.
  reserving.then((late) => late.release(), () => {});
  throw new Error(signal?.aborted ? "stopping: the job did not start" : `no database connection could be reserved within ${ms} ms`);
}

/**
 * Runs `work` while holding the session-level advisory lock `lockId`, on a connection reserved
 * for it; when another session holds the lock, returns `{ ran: false }` at once, never waits.
 *
 * Session-level rather than transaction-level: a retention job deletes in many short
 * transactions (one per batch) so that a backlog never holds one long transaction, which a
 * transaction-scoped lock would force. The lock belongs to the reserved connection, and
 * `work` runs its statements on that same connection: if the connection dies, the lock is
 * released by the server and the job's statements fail with it, so a second runner can never
 * overlap a first one that still writes. `signal` (the caller stopping) gives up the wait for
 * a connection; a job that has started runs to its end.
 *
 * Behind a transaction pooler a session lock would belong to a server connection other
 * clients use next: there `work` runs in one transaction that holds the lock with
 * pg_try_advisory_xact_lock (the same lock space: it excludes session holders elsewhere too).
 * Retention jobs use deleteUnderJobLock, which keeps their transactions short.
 */
export async function withJobLock<T>(sql: Sql, lockId: bigint, work: (conn: Sql) => Promise<T>, signal?: AbortSignal): Promise<Locked<T>> {
  if (isTransactionPooled(sql)) return withTransactionLock(sql, lockId, work);
  const conn = await reserveWithin(sql, RESERVE_TIMEOUT_MS, signal);
  // postgres.js 3.4.9: a reserved connection that closes is already back among the pool's
  // closed ones; release() would then list it as open, and the next query sent on it (any
  // caller's) throws an uncatchable TypeError that ends the process. So once the connection
  // is lost, neither unlock (the server dropped the lock with the session) nor release.
  let lost = false;
  const noteLost = (error: unknown): never => {
    lost ||= isConnectionLost(error);
    throw error;
  };
  try {
    const [row] = await conn<{ locked: boolean }[]>`select pg_try_advisory_lock(${lockId.toString()}::bigint) as locked`.catch(noteLost);
    if (!row?.locked) return { ran: false };
    try {
      return { ran: true, value: await work(conn as unknown as Sql).catch(noteLost) };
    } finally {
      if (!lost) await conn`select pg_advisory_unlock(${lockId.toString()}::bigint)`.catch((error: unknown) => void (lost ||= isConnectionLost(error)));
    }
  } finally {
    if (!lost) conn.release();
  }
}

/** `work` in a transaction that holds the lock, or `{ ran: false }` at once when another session does. */
function withTransactionLock<T>(sql: Sql, lockId: bigint, work: (tx: Sql) => Promise<T>): Promise<Locked<T>> {
  return transaction(sql, async (tx): Promise<Locked<T>> => {
    const [row] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${lockId.toString()}::bigint) as locked`;
    // The jobs' statements are plain queries: the transaction serves them as a pool would.
    return row?.locked ? { ran: true, value: await work(tx as unknown as Sql) } : { ran: false };
  });
}

export interface BatchLimits {
  /** Rows per statement: small enough that each statement's locks last milliseconds. */
  readonly batch: number;
  /** Statements per run, so one run ends even behind a huge backlog; the next run continues. */
  readonly maxBatches: number;
}

/** Repeats `deleteBatch` (one statement, one short transaction) until a batch comes back short. */
export async function deleteInBatches(limits: BatchLimits, deleteBatch: () => Promise<number>): Promise<{ deleted: number; batches: number }> {
  let deleted = 0;
  let batches = 0;
  while (batches < limits.maxBatches) {
    const n = await deleteBatch();
    batches++;
    deleted += n;
    if (n < limits.batch) break;
  }
  return { deleted, batches };
}

/**
 * `deleteBatch` (one statement) repeated under the job's lock until a batch comes back short
 * (deleteInBatches): one session lock over every batch; behind a transaction pooler, every
 * batch in a transaction of its own that takes the lock again, so a run never holds one long
 * transaction (its row locks, the vacuum horizon) and no batch runs beside another process's.
 * When a later batch finds the lock taken, another process has started the job: the run ends
 * there with what it deleted, and that process carries on.
 */
export async function deleteUnderJobLock(
  sql: Sql,
  lockId: bigint,
  limits: BatchLimits,
  deleteBatch: (conn: Sql) => Promise<number>,
  signal?: AbortSignal,
): Promise<Locked<{ deleted: number; batches: number }>> {
  if (!isTransactionPooled(sql)) return withJobLock(sql, lockId, (conn) => deleteInBatches(limits, () => deleteBatch(conn)), signal);
  let deleted = 0;
  let batches = 0;
  while (batches < limits.maxBatches) {
    const step = await withTransactionLock(sql, lockId, deleteBatch);
    if (!step.ran) break;
    batches++;
    deleted += step.value;
    if (step.value < limits.batch) break;
  }
  return batches === 0 ? { ran: false } : { ran: true, value: { deleted, batches } };
}

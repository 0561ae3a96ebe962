// One runner per periodic job across every process sharing the database, and the bounded batch
// loop the retention jobs use.
import { isConnectionLost, type Sql } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { transaction } from "./tx.ts";
import { within } from "./within.ts";

export type Locked<T> = { readonly ran: true; readonly value: T } | { readonly ran: false };

// postgres.js 3.4.9 can leave reserve() waiting for good once its connections were killed.
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

// `work` on the connection holding session lock `lockId`, so the lock dies with its statements and
// a second runner never overlaps a first that still writes; `{ ran: false }` when it is taken.
// Behind a transaction pooler, one transaction holding pg_try_advisory_xact_lock (same lock space).
export async function withJobLock<T>(sql: Sql, lockId: bigint, work: (conn: Sql) => Promise<T>, signal?: AbortSignal): Promise<Locked<T>> {
  if (isTransactionPooled(sql)) return withTransactionLock(sql, lockId, work);
  const conn = await reserveWithin(sql, RESERVE_TIMEOUT_MS, signal);
  // A lost connection is neither unlocked (the server dropped the lock) nor released: postgres.js 3.4.9
  // would list it as open too, and the next query on it would end the process (uncatchable TypeError).
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

/** Repeats `step` until a batch comes back short, or `step` finds the lock taken (undefined). */
async function deleteInBatches(limits: BatchLimits, step: () => Promise<number | undefined>): Promise<{ deleted: number; batches: number }> {
  let deleted = 0;
  let batches = 0;
  while (batches < limits.maxBatches) {
    const n = await step();
    if (n === undefined) break;
    batches++;
    deleted += n;
    if (n < limits.batch) break;
  }
  return { deleted, batches };
}

// Behind a transaction pooler, a transaction per batch that takes the lock again (never one long
// transaction); a batch that finds it taken ends the run: another process carries on.
export async function deleteUnderJobLock(
  sql: Sql,
  lockId: bigint,
  limits: BatchLimits,
  deleteBatch: (conn: Sql) => Promise<number>,
  signal?: AbortSignal,
): Promise<Locked<{ deleted: number; batches: number }>> {
  if (!isTransactionPooled(sql)) return withJobLock(sql, lockId, (conn) => deleteInBatches(limits, () => deleteBatch(conn)), signal);
  const run = await deleteInBatches(limits, async () => {
    const step = await withTransactionLock(sql, lockId, deleteBatch);
    return step.ran ? step.value : undefined;
  });
  return run.batches === 0 ? { ran: false } : { ran: true, value: run };
}

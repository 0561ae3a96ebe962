// A transaction that never touches a connection closed under it: postgres.js 3.4.9 (porsager/postgres
// #1154, #1208) ends the process with an uncatchable TypeError when a statement, or sql.begin()'s
// ROLLBACK/COMMIT, is sent on a closed socket. From the close on, the callback never settles.
import { isConnectionLost, type Sql, type Tx } from "./db.ts";
import { within } from "./within.ts";

// How long a connection-level error waits for postgres.js to confirm the close; unconfirmed, it is
// alive: postgres.js 3.4.9 hands a killed connection's stale 57P01 to the first query after reconnect.
const CLOSE_CONFIRM_MS = 1000;

/** Never settles; what awaits it is dropped with it (nothing else references it). */
export const forever = (): Promise<never> => new Promise<never>(() => {});

const inProgress = new WeakMap<Sql, number>();

/** Transactions begun on `sql` through transaction() and not settled: connections held or awaited. */
export function transactionsInProgress(sql: Sql): number {
  return inProgress.get(sql) ?? 0;
}

// sql.begin(work), whose `tx` never sends a statement once the connection is lost (savepoints are
// not guarded); `lost()` says so, for work that must not park holding what others wait on.
export function transaction<T>(sql: Sql, work: (tx: Tx, lost: () => boolean) => Promise<T>): Promise<T> {
  let lost = false;
  let confirmLost: () => void = () => {};
  const closed = new Promise<void>((resolve) => (confirmLost = resolve));
  const isLost = (): boolean => lost;
  const result = sql.begin(async (tx) => {
    try {
      const value = await work(guarded(tx, isLost), isLost);
      if (lost) await forever(); // no COMMIT on a dead connection
      return value;
    } catch (error) {
      if (isConnectionLost(error)) await within(closed, CLOSE_CONFIRM_MS);
      if (lost) await forever(); // no ROLLBACK on a dead connection
      throw error; // the connection is alive: postgres.js rolls back
    }
  }) as Promise<T>;
  result.catch(() => {
    lost = true;
    confirmLost();
  });
  inProgress.set(sql, transactionsInProgress(sql) + 1);
  const settled = (): void => void inProgress.set(sql, transactionsInProgress(sql) - 1);
  result.then(settled, settled);
  return result;
}

/** `tx`, except that a statement made once `lost()` is never sent and never settles. */
function guarded(tx: Tx, lost: () => boolean): Tx {
  const unsafe = new Proxy(tx.unsafe, {
    apply: (target, self, args: unknown[]) => (lost() ? forever() : Reflect.apply(target, self, args)),
  });
  return new Proxy(tx, {
    apply(target, self, args: unknown[]) {
      const template = Array.isArray((args[0] as { raw?: unknown } | undefined)?.raw);
      return template && lost() ? forever() : Reflect.apply(target, self, args);
    },
    get(target, key, receiver) {
      return key === "unsafe" ? unsafe : Reflect.get(target, key, receiver);
    },
  });
}

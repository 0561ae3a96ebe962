// The API's one statement per request, within its deadline and its pool's time bounds.
import type { Sql, Tx } from "./db.ts";
import { isTransactionPooled } from "./pooler.ts";
import { REQUEST_DEADLINE, settleBy, TimeBoundError, type Cancellable } from "./pool-gate.ts";
import { transaction } from "./tx.ts";

// Behind a transaction pooler the bounds exist only in a transaction (three round trips). A pooler
// queues a BEGIN where no cancel reaches: past the deadline the request is refused, and the
// statement, never sent, is rolled back with its transaction once the pooler gets to it.
export function boundedStatement<T>(sql: Sql, endsAt: number, build: (q: Sql | Tx) => Cancellable<T>): Promise<T> {
  if (!isTransactionPooled(sql)) return settleBy(build(sql), endsAt);
  let late = false;
  let started = false;
  const run = transaction(sql, (tx) => {
    if (late) return Promise.reject(new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed before the pooler gave a connection"));
    started = true;
    return settleBy(build(tx), endsAt);
  });
  const ms = endsAt - performance.now();
  if (ms === Number.POSITIVE_INFINITY) return run;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      if (started) return; // settleBy bounds the statement from here
      late = true;
      reject(new TimeBoundError(REQUEST_DEADLINE, "the pooler gave no connection within the request's deadline"));
    }, Math.max(0, ms));
    run.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}

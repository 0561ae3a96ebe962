// Opens the API's whole pool before the process listens: postgres.js opens a connection only when
// every open one is busy, so a process started under load would make its first requests wait on
// backends being forked and authenticated.
import { sqlState, type Sql } from "../platform/db.ts";
import { within } from "../platform/within.ts";

// Bounds the whole opening (each connect has the pool's own timeout): a server that stops
// answering mid-way delays the start at most this long, the rest opening on demand.
const POOL_OPEN_TIMEOUT_MS = 6_000;

/**
 * Sends `size` queries at once, each given its own connection while the pool has unopened ones.
 * Not reserve(): in postgres.js 3.4.9 a reservation whose connection is refused can be dropped in
 * the reconnect, losing connections handed back afterwards (porsager/postgres#1195, #1199). Never
 * throws: `failure` is the SQLSTATE or client code of the first refusal, for the caller to log.
 */
export async function openPool(sql: Sql, size: number, timeoutMs = POOL_OPEN_TIMEOUT_MS): Promise<{ opened: number; wanted: number; failure?: string }> {
  let opened = 0;
  let failure: string | undefined;
  const opening = Array.from({ length: size }, () =>
    sql`select 1`.then(
      () => void opened++,
      (error: unknown) => void (failure ??= sqlState(error) ?? "unknown"),
    ),
  );
  const done = await within(Promise.all(opening), timeoutMs);
  if (done === undefined) failure ??= "timeout";
  return failure === undefined ? { opened, wanted: size } : { opened, wanted: size, failure };
}

// Opens the API's whole pool before the process listens. postgres.js opens a connection only when
// every open one is busy, so a process started under load (a restart, a rolling deploy) would make
// its first requests wait on backends being forked and authenticated (bench/README.md, "API
// start-up").
import { sqlState, type Sql } from "../platform/db.ts";
import { within } from "../platform/within.ts";

/** `failure`: the SQLSTATE or client code of the first refusal. */
export interface PoolOpening {
  readonly opened: number;
  readonly wanted: number;
  readonly failure?: string;
}

// Each connect is bounded by the pool's connect timeout; this bounds the whole opening, so a
// server that stops answering mid-way delays the start at most this long. The rest of the pool
// then opens on demand.
export const POOL_OPEN_TIMEOUT_MS = 6_000;

/**
 * Sends `size` queries at once: postgres.js gives each its own connection while the pool has
 * unopened ones. Not reserve(): in postgres.js 3.4.9 a reservation whose connection is refused
 * can be dropped in the reconnect, and connections handed back afterwards are lost to the pool
 * (porsager/postgres#1195, #1199). Never throws: a server that refuses some (max_connections)
 * leaves the rest to open on demand, and the caller logs what happened.
 */
export async function openPool(sql: Sql, size: number, timeoutMs = POOL_OPEN_TIMEOUT_MS): Promise<PoolOpening> {
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

// Opens the API's whole pool before the process listens. postgres.js opens a connection only
// when a query finds every open one busy, so a process that starts under load (a restart, a
// rolling deploy behind a balancer that sends traffic as soon as /readyz answers) made its
// first requests wait while up to API_POOL_SIZE backends were forked and authenticated;
// opening the pool first roughly halves the p99 of a new process's first seconds
// (bench/README.md, "API start-up").
import { sqlState, type Sql } from "../platform/db.ts";
import { within } from "../platform/within.ts";

/** How the opening went: `failure` is the SQLSTATE or client code of the first refusal. */
export interface PoolOpening {
  readonly opened: number;
  readonly wanted: number;
  readonly failure?: string;
}

// Each connect is bounded by the pool's own connect timeout (5 s, lib/platform/db.ts); this
// bounds the whole opening, so a server that stops answering mid-way delays the start by at
// most this long. The rest of the pool then opens on demand, as before.
export const POOL_OPEN_TIMEOUT_MS = 6_000;

/**
 * Sends `size` queries at once: postgres.js gives each a connection of its own while the pool
 * has unopened ones, so the pool opens in full. Not reserve(): in postgres.js 3.4.9 a
 * reservation whose connection is refused can be handed to the reconnect and dropped there,
 * and connections handed back afterwards are lost to the pool (seen with a role's connection
 * limit: 5 pools in 20 ended with no usable connection; upstream porsager/postgres#1195 and
 * #1199 describe the same queue). Never throws: a server that refuses some (max_connections
 * reached, say) leaves the rest to open on demand, and the caller logs what happened.
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

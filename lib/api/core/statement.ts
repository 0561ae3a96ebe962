// The one statement of every idempotent operation, built from its declaration (operation.ts).
// A request alone and a batch of requests (group commit, batcher.ts) run the same statement:
// the requests arrive as one JSON array of rows (jsonb_to_recordset), so one prepared statement serves any count
// and no statement is written twice.
import type { Sql } from "../../shared/db.ts";
import { boundedStatement } from "../../shared/bounded-statement.ts";
import { insertEvents } from "../../shared/outbox-insert.ts";
import { endpointOf, type ColumnValue, type Fragment, type Operation, type SqlType } from "./operation.ts";

/** One request's row of the statement (`req`). */
export interface RequestRow {
  readonly tenant: string;
  readonly key: string;
  readonly lockId: string;
  readonly requestHash: string;
  readonly responseBody: string;
  readonly eventId: string;
  readonly traceparent: string | null;
  readonly columns: Readonly<Record<string, ColumnValue>>;
}

/** What the statement answers for one request. */
export interface KeyRow {
  /** null: a live key row existed, so the lock was not even tried. */
  readonly got: boolean | null;
  /** 1 when this request's key row, writes and event were written. */
  readonly created: number;
  /** The operation's refusal (admit), with nothing written. */
  readonly refusal: string | null;
  readonly detail: string | null;
  readonly request_hash: string | null;
  readonly status: "STARTED" | "COMPLETED" | null;
  readonly response_status: number | null;
  readonly response_body: string | null;
}

/** An operation bound to one client: its fragments, built once. */
export interface CompiledOperation {
  readonly op: Operation;
  readonly endpoint: string;
  readonly record: Fragment;
  readonly admit: Fragment;
  readonly write: Fragment;
  /** The outbox insert (lib/shared/outbox-insert.ts). */
  readonly event: Fragment;
}

// The core's columns of `req`, before the operation's own.
const CORE_COLUMNS: Readonly<Record<string, SqlType>> = {
  n: "int",
  tenant: "text",
  key: "text",
  lock_id: "bigint",
  request_hash: "text",
  response_body: "text",
  event_id: "uuid",
  traceparent: "text",
};
const COLUMN_NAME = /^[a-z_][a-z0-9_]*$/;
const SQL_TYPES = new Set<SqlType>(["uuid", "text", "int", "bigint", "timestamptz"]);

export function compileOperation(sql: Sql, op: Operation): CompiledOperation {
  const columns = { ...CORE_COLUMNS, ...op.columns };
  const record = Object.entries(columns).map(([name, type]) => {
    // The names and types come from declarations in lib/, never from a request; checked so that
    // a typo fails at start rather than as SQL.
    if (!COLUMN_NAME.test(name) || !SQL_TYPES.has(type)) throw new Error(`bug: operation ${op.name} declares column ${name} ${type}`);
    return `${name} ${type}`;
  });
  const { admit, write } = op.sql(sql);
  return { op, endpoint: endpointOf(op), record: sql.unsafe(record.join(", ")), admit, write, event: insertEvents(sql) };
}

/** The rows as jsonb_to_recordset reads them: the core's columns, then the operation's. */
function rowsJson(rows: readonly RequestRow[]): Record<string, ColumnValue>[] {
  return rows.map((r, i) => ({
      n: i,
      tenant: r.tenant,
      key: r.key,
      lock_id: r.lockId,
      request_hash: r.requestHash,
      response_body: r.responseBody,
      event_id: r.eventId,
      traceparent: r.traceparent,
      ...r.columns,
    }));
}

/**
 * Every request of `rows` in ONE statement, so one round trip (three behind a transaction
 * pooler: bounded-statement.ts) and one transaction for any outcome, row by row, each scoped
 * to its own tenant and key:
 *  - existing: the live (unexpired) key row, if committed before this statement; then
 *    nothing is locked or written (a replay is a read-only transaction: no commit flush);
 *  - lock: otherwise the (tenant, key, endpoint) advisory lock, without waiting: a request in
 *    flight with the same key holds it, so the answer is a 409 at once instead of a wait on
 *    the unique index until it commits;
 *  - admit: the operation's own checks (its refusals write nothing and leave the key unused);
 *  - claimed: the key row, already COMPLETED with the response to replay (nobody can see it
 *    half-done: the rows commit together or not at all); an expired row is overwritten in
 *    place, so an expired key is new again;
 *  - the operation's writes and events, only for the rows whose key row was written (`won`),
 *    and the outbox rows for those events.
 * The unique (tenant, key, endpoint) index stays the safety net under the advisory lock.
 * Two requests for one (tenant, key) must not share a statement (the advisory lock is
 * re-entrant within a transaction, and ON CONFLICT may not touch one row twice): the batcher
 * keeps them apart. The key lookup is a lateral subquery kept from being flattened (offset 0),
 * so each request reads the unique index, whatever the planner guesses of the array's length.
 * Rows come back in the order of `rows`.
 */
export async function runOperation(sql: Sql, c: CompiledOperation, ttlSeconds: number, rows: readonly RequestRow[], endsAt = Number.POSITIVE_INFINITY): Promise<KeyRow[]> {
  const result = await boundedStatement(sql, endsAt, (q) => q<KeyRow[]>`
    with req as (
      select * from jsonb_to_recordset(${q.json(rowsJson(rows))}) as r(${c.record})
    ),
    existing as (
      select r.n, e.request_hash, e.status, e.response_status, e.response_body
        from req r
       cross join lateral (
         select request_hash, status, response_status, response_body
           from idempotency_keys
          where tenant = r.tenant and key = r.key and endpoint = ${c.endpoint} and expires_at > now()
         offset 0
       ) as e
    ),
    lock as (
      select r.n, pg_try_advisory_xact_lock(r.lock_id) as got
        from req r
       where not exists (select 1 from existing x where x.n = r.n)
    ),
    ${c.admit},
    claimed as (
      insert into idempotency_keys as k
             (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at)
      select r.tenant, r.key, ${c.endpoint}, r.request_hash, 'COMPLETED', ${c.op.status}::int,
             r.response_body, now() + make_interval(secs => ${ttlSeconds}::int)
        from req r join admit a on a.n = r.n
       where a.refusal is null
      on conflict (tenant, key, endpoint) do update
         set request_hash = excluded.request_hash, status = excluded.status,
             response_status = excluded.response_status, response_body = excluded.response_body,
             created_at = now(), expires_at = excluded.expires_at
       where k.expires_at <= now()
      returning k.tenant, k.key
    ),
    won as (
      select r.* from req r join claimed k on k.tenant = r.tenant and k.key = r.key
    ),
    ${c.write},
    ${c.event}
    select l.got,
           (exists (select 1 from event v where v.id = r.event_id))::int as created,
           a.refusal, a.detail,
           e.request_hash, e.status, e.response_status, e.response_body
      from req r
      left join lock l on l.n = r.n
      left join admit a on a.n = r.n
      left join existing e on e.n = r.n
     order by r.n`);
  if (result.length !== rows.length) throw new Error(`bug: ${c.op.name} returned ${result.length} rows for ${rows.length} requests`);
  return result;
}

/** The key row as committed now; used only after a lost race the statement above cannot see. */
export async function findKey(sql: Sql, tenant: string, key: string, endpoint: string, endsAt = Number.POSITIVE_INFINITY): Promise<KeyRow | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<KeyRow[]>`
    select null::boolean as got, 0 as created, null::text as refusal, null::text as detail,
           request_hash, status, response_status, response_body
      from idempotency_keys
     where tenant = ${tenant} and key = ${key} and endpoint = ${endpoint} and expires_at > now()`);
  return rows[0];
}

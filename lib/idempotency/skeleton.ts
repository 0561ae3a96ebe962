// The one SQL skeleton of every operation: the key's claim (the ledger's single statement, or
// phase 1) and phase 3 wrap an operation's fragments (model.ts). The requests arrive as one JSON
// array of rows (jsonb_to_recordset), so one prepared statement serves a request or a batch.
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import { newEventId } from "../platform/uuid.ts";
import { SQL_TYPES, endpointOf, type ColumnValue, type FinalOutcome, type Fragment, type Mode, type Operation, type Resume, type SqlType, type StoredResponse } from "./model.ts";

/** What a key statement (single or phase 1) answers for one request. */
export interface KeyRow {
  /** null: a live key row existed, so the lock was not even tried. */
  readonly got: boolean | null;
  /** 1 when this request's key row and writes were written. */
  readonly created: number;
  readonly refusal: string | null;
  readonly detail: string | null;
  readonly request_hash: string | null;
  /** EXPIRED: a tombstone, or a COMPLETED key past its expiry not yet turned into one. */
  readonly status: "STARTED" | "COMPLETED" | "EXPIRED" | null;
  readonly response_status: number | null;
  readonly response_body: string | null;
  /** A tombstone's resource. */
  readonly location?: string | null;
  /** The admit's response body, stored in place of the request's. */
  readonly answer?: string | null;
  /** Phase 1: the key's recovery data as written. */
  readonly resume?: Resume | null;
}

/** One request's row of a key statement: the core's columns, then the operation's. */
export type RequestRow = Readonly<Record<string, ColumnValue>>;

export interface FinishRequest {
  readonly key: HeldKey;
  readonly outcome: FinalOutcome;
  readonly resume: Resume;
}

export interface KeyRef {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
}

/** A key whose lease this process holds: its token, and how far the steps got. */
export interface HeldKey extends KeyRef {
  readonly token: string;
  readonly point: string;
  readonly resume: Resume;
}

/** An operation's fragments in one mode, bound to one client, built once. */
export interface Compiled {
  readonly op: Operation;
  readonly endpoint: string;
  readonly record: Fragment;
  readonly admit: Fragment;
  readonly write: Fragment;
  readonly existing: Fragment;
  /** What follows `write`: the outbox insert, empty in phase 1. */
  readonly event: Fragment;
  /** A claim's `created` and `resume` columns. */
  readonly result: Fragment;
  /** The ledger's key row values (COMPLETED with its answer); undefined in phase 1. */
  readonly completed: Fragment | undefined;
}

// The core's columns of `req`, before the operation's own, per statement.
const KEY_COLUMNS = { n: "int", tenant: "text", key: "text", lock_id: "bigint", request_hash: "text" } as const;
const LEDGER_COLUMNS: Readonly<Record<string, SqlType>> = { ...KEY_COLUMNS, response_body: "text", event_id: "uuid", traceparent: "text" };
const BEGIN_COLUMNS: Readonly<Record<string, SqlType>> = { ...KEY_COLUMNS, resume: "text", token: "uuid" };
const FINISH_COLUMNS: Readonly<Record<string, SqlType>> = {
  n: "int", tenant: "text", key: "text", endpoint: "text", token: "uuid", outcome: "text",
  response_status: "int", response_body: "text", resume: "jsonb", event_id: "uuid", traceparent: "text",
};
const COLUMN_NAME = /^[a-z_][a-z0-9_]*$/;

/** `req`'s record type. Names and types come from declarations, never a request: checked at start. */
function recordOf(sql: Sql, owner: string, columns: Readonly<Record<string, SqlType>>): Fragment {
  const record = Object.entries(columns).map(([name, type]) => {
    if (!COLUMN_NAME.test(name) || !SQL_TYPES.includes(type)) throw new Error(`bug: ${owner} declares column ${name} ${type}`);
    return `${name} ${type}`;
  });
  return sql.unsafe(record.join(", "));
}

const compiledBySql = new WeakMap<Sql, Map<Operation, Partial<Record<Mode | "finish", Compiled>>>>();

/** `op`'s statement in `mode` (or its phase 3), compiled once per client. */
export function compile(sql: Sql, op: Operation, mode: Mode | "finish"): Compiled {
  let byOp = compiledBySql.get(sql);
  if (byOp === undefined) compiledBySql.set(sql, (byOp = new Map()));
  let byMode = byOp.get(op);
  if (byMode === undefined) byOp.set(op, (byMode = {}));
  return (byMode[mode] ??= build(sql, op, mode));
}

function build(sql: Sql, op: Operation, mode: Mode | "finish"): Compiled {
  const endpoint = endpointOf(op);
  // The outbox insert of every statement that commits events, so both modes' events have one shape.
  const event = sql`,
    event as (
      insert into outbox (id, aggregate_type, aggregate_id, sequence, tenant, event_type, payload, traceparent)
      select w.event_id, e.aggregate_type, e.aggregate_id, e.sequence, w.tenant, e.event_type, e.payload, w.traceparent
        from events e join won w on w.n = e.n
      returning id
    )`;
  if (mode === "finish") {
    const { columns, write } = op.foreign!.finishSql(sql);
    return { op, endpoint, record: recordOf(sql, op.name, { ...FINISH_COLUMNS, ...columns }), admit: sql``, write, existing: sql``, event, result: sql``, completed: undefined };
  }
  const own = mode === "ledger" ? op.columns : { ...op.foreign!.columns };
  const record = recordOf(sql, op.name, { ...(mode === "ledger" ? LEDGER_COLUMNS : BEGIN_COLUMNS), ...own });
  const { admit, write } = op.sql(sql, mode);
  // A key row is found until its tombstone has passed: a COMPLETED key past its expiry answers as
  // a tombstone (410), never as a new key. A STARTED key is never overwritten, even past its
  // expiry: its payment may have moved money, and only its steps may finish it.
  const existing = sql`
    existing as (
      select r.n, e.request_hash, e.status, e.response_status, e.response_body, e.location
        from req r
       cross join lateral (
         select request_hash, case when status = 'COMPLETED' and expires_at <= now() then 'EXPIRED' else status end as status, response_status, response_body, location
           from idempotency_keys
          where tenant = r.tenant and key = r.key and endpoint = ${endpoint} and (expires_at > now() or status <> 'EXPIRED')
         offset 0
       ) as e
    ),
    lock as (
      select r.n, pg_try_advisory_xact_lock(r.lock_id) as got
        from req r
       where not exists (select 1 from existing x where x.n = r.n)
    )`;
  if (mode === "processor") return { op, endpoint, record, admit, write, existing, event: sql``, result: sql`(exists (select 1 from begun b where b.n = r.n))::int as created, (select k.resume from claimed k where k.tenant = r.tenant and k.key = r.key) as resume`, completed: undefined };
  const result = sql`(exists (select 1 from event v where v.id = r.event_id))::int as created, null::jsonb as resume`;
  const completed = sql`'COMPLETED', ${op.status}::int, coalesce(a.answer, r.response_body), null::text, null::uuid, null::timestamptz, null::jsonb`;
  return { op, endpoint, record, admit, write, existing, event, result, completed };
}

/** How long a claimed key's answer lives, and phase 1's lease. */
type ClaimTerms = Readonly<{ ttlSeconds: number; leaseMs: number }>;

/**
 * The key's claim, the one statement that inserts a key: every request of `rows` in one round
 * trip and one transaction, row by row:
 *  - existing: the key row, if any; then nothing is locked or written;
 *  - lock: else the key's advisory lock, without waiting: a request in flight holds it (409);
 *  - admit: the operation's checks (a refusal writes nothing);
 *  - claimed: the key row, COMPLETED with its answer (the ledger) or STARTED under a lease at
 *    the first recovery point (phase 1); a tombstone past its end is overwritten in place;
 *  - the operation's writes for the rows whose key row was written (`won`).
 * The unique index stays the safety net under the advisory lock. The lookup is a lateral
 * subquery kept from being flattened (offset 0), so each request reads the unique index.
 */
export async function runClaim(sql: Sql, c: Compiled, terms: ClaimTerms, rows: readonly RequestRow[], endsAt = Number.POSITIVE_INFINITY): Promise<KeyRow[]> {
  const values =
    c.completed ??
    sql`'STARTED', null::int, null::text, ${c.op.foreign!.firstPoint}, r.token,
        now() + make_interval(secs => ${terms.leaseMs / 1000}::float8), r.resume::jsonb || coalesce(a.resume, '{}'::jsonb)`;
  const result = await boundedStatement(sql, endsAt, (q) => q<(KeyRow & { n: number })[]>`
    with req as (
      select * from jsonb_to_recordset(${q.json(rows as never)}) as r(${c.record})
    ),
    ${c.existing},
    ${c.admit},
    claimed as (
      insert into idempotency_keys as k
             (tenant, key, endpoint, request_hash, status, response_status, response_body,
              recovery_point, lease_token, lease_until, resume, expires_at)
      select r.tenant, r.key, ${c.endpoint}, r.request_hash, ${values}, now() + make_interval(secs => ${terms.ttlSeconds}::int)
        from req r join admit a on a.n = r.n
       where a.refusal is null
      on conflict (tenant, key, endpoint) do update
         set request_hash = excluded.request_hash, status = excluded.status, response_status = excluded.response_status,
             response_body = excluded.response_body, created_at = now(), expires_at = excluded.expires_at,
             recovery_point = excluded.recovery_point, lease_token = excluded.lease_token, lease_until = excluded.lease_until,
             resume = excluded.resume, attempts = 0, next_attempt_at = null, last_error = null, parked_at = null,
             location = null, completed_at = null
       where k.expires_at <= now() and k.status = 'EXPIRED'
      returning k.tenant, k.key, k.resume
    ),
    won as (
      select r.* from req r join claimed k on k.tenant = r.tenant and k.key = r.key
    ),
    ${c.write}${c.event}
    select r.n, l.got, ${c.result}, a.refusal, a.detail, a.answer,
           e.request_hash, e.status, e.response_status, e.response_body, e.location
      from req r
      left join lock l on l.n = r.n
      left join admit a on a.n = r.n
      left join existing e on e.n = r.n
     order by r.n`);
  // By n, not by position: postgres.js 3.4.9 can hand the next query on a connection whose
  // previous one failed mid-stream a sparse array (porsager/postgres#1119).
  const byN: KeyRow[] = [];
  for (const row of result) if (row !== undefined) byN[row.n] = row;
  for (let n = 0; n < rows.length; n++) if (byN[n] === undefined) throw new Error(`bug: ${c.op.name}'s claim returned ${result.length} rows for ${rows.length} requests`);
  return byN;
}

/**
 * Phase 3 of every request in one statement: the compare-and-set on each holder's token
 * completes its key, and only the keys it completed get the operation's rows and event. For
 * each: the response stored, or undefined when its holder had lost the lease. Under READ
 * COMMITTED a key taken over meanwhile is re-read after the taker commits and no longer matches.
 */
export async function runFinish(sql: Sql, c: Compiled, requests: readonly FinishRequest[], endsAt = Number.POSITIVE_INFINITY): Promise<(StoredResponse | undefined)[]> {
  const finals = requests.map((r) => c.op.foreign!.final(r.outcome, r.resume));
  const rows = requests.map((r, n) => ({
    n,
    tenant: r.key.tenant,
    key: r.key.key,
    endpoint: r.key.endpoint,
    token: r.key.token,
    outcome: r.outcome,
    response_status: finals[n]!.response.status,
    response_body: finals[n]!.response.body,
    resume: r.resume,
    event_id: newEventId(),
    traceparent: typeof r.resume.traceparent === "string" ? r.resume.traceparent : null,
    ...finals[n]!.columns,
  }));
  const done = await boundedStatement(sql, endsAt, (q) => q<{ n: number }[]>`
    with req as (
      select * from jsonb_to_recordset(${q.json(rows as never)}) as r(${c.record})
    ),
    completed as (
      update idempotency_keys k
         set status = 'COMPLETED', response_status = r.response_status, response_body = r.response_body,
             recovery_point = r.outcome, resume = r.resume, lease_token = null, lease_until = null,
             last_error = null, next_attempt_at = null, parked_at = null, completed_at = now()
        from req r
       where k.tenant = r.tenant and k.key = r.key and k.endpoint = r.endpoint
         and k.status = 'STARTED' and k.lease_token = r.token
      returning r.n
    ),
    won as (
      select r.* from req r join completed d on d.n = r.n
    ),
    ${c.write}${c.event}
    select n from completed`);
  // A Set of n, not positions: postgres.js 3.4.9 can hand back a sparse array (porsager/postgres#1119).
  const won = new Set(done.map((d) => d.n));
  return finals.map((f, n) => (won.has(n) ? f.response : undefined));
}

/** The key row as committed now; used only after a lost race the statements above cannot see. */
export async function findKey(sql: Sql, tenant: string, key: string, endpoint: string, endsAt = Number.POSITIVE_INFINITY): Promise<KeyRow | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<KeyRow[]>`
    select null::boolean as got, 0 as created, null::text as refusal, null::text as detail,
           request_hash, case when status = 'COMPLETED' and expires_at <= now() then 'EXPIRED' else status end as status, response_status, response_body, location
      from idempotency_keys
     where tenant = ${tenant} and key = ${key} and endpoint = ${endpoint} and (expires_at > now() or status <> 'EXPIRED')`);
  return rows[0];
}

// The statements of the charges API. One exported function per statement, `sql` first.
import type { Sql } from "../shared/db.ts";
import { settleBy } from "../shared/pool-gate.ts";

export interface StoredResponse {
  readonly request_hash: string;
  readonly status: "STARTED" | "COMPLETED";
  readonly response_status: number | null;
  readonly response_body: string | null;
}

export interface CreateChargeParams {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
  readonly lockId: string;
  readonly requestHash: string;
  readonly ttlSeconds: number;
  readonly chargeId: string;
  readonly amountCents: number;
  readonly createdAt: string;
  readonly responseStatus: number;
  readonly responseBody: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly eventPayload: string;
  readonly traceparent: string | null;
}

export interface CreateChargeRow {
  /** null: a live key row exists, so the lock was not even tried. */
  readonly got: boolean | null;
  readonly created: number;
  readonly request_hash: string | null;
  readonly status: "STARTED" | "COMPLETED" | null;
  readonly response_status: number | null;
  readonly response_body: string | null;
}

/**
 * The whole POST /charges in ONE statement, so one round trip and one implicit
 * transaction for every outcome:
 *  - existing: the live (unexpired) key row, if committed before this statement; then
 *    nothing is locked or written (a replay is a read-only transaction: no commit flush);
 *  - lock: otherwise try the (tenant, key, endpoint) advisory lock without waiting; a request in
 *    flight with the same key holds it, so we answer 409 at once instead of queueing on
 *    the unique index until it commits;
 *  - claimed: insert the key row already COMPLETED with the response to replay (no one
 *    else can ever see it half-done: the rows commit together or not at all); an expired
 *    row is overwritten in place, so an expired key is new again;
 *  - charge and event: the charge and its outbox row, only when the key row was written.
 * The unique (tenant, key, endpoint) index stays the safety net under the advisory lock.
 * Every read and write is scoped to the tenant: another tenant's key is not seen, not
 * replayed, not locked and does not conflict.
 */
export async function createCharge(sql: Sql, p: CreateChargeParams, endsAt = Number.POSITIVE_INFINITY): Promise<CreateChargeRow> {
  const rows = await settleBy(sql<CreateChargeRow[]>`
    with existing as (
      select request_hash, status, response_status, response_body
        from idempotency_keys
       where tenant = ${p.tenant} and key = ${p.key} and endpoint = ${p.endpoint} and expires_at > now()
    ),
    lock as (
      select pg_try_advisory_xact_lock(${p.lockId}::bigint) as got
       where not exists (select 1 from existing)
    ),
    claimed as (
      insert into idempotency_keys as k
             (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at)
      select ${p.tenant}, ${p.key}, ${p.endpoint}, ${p.requestHash}, 'COMPLETED', ${p.responseStatus}::int,
             ${p.responseBody}, now() + make_interval(secs => ${p.ttlSeconds}::int)
        from lock
       where lock.got
      on conflict (tenant, key, endpoint) do update
         set request_hash = excluded.request_hash, status = excluded.status,
             response_status = excluded.response_status, response_body = excluded.response_body,
             created_at = now(), expires_at = excluded.expires_at
       where k.expires_at <= now()
      returning 1
    ),
    charge as (
      insert into charges (id, tenant, amount_cents, created_at)
      select ${p.chargeId}::uuid, ${p.tenant}, ${p.amountCents}::int, ${p.createdAt}::timestamptz from claimed
      returning id
    ),
    event as (
      insert into outbox (id, aggregate_id, tenant, event_type, payload, traceparent)
      select ${p.eventId}::uuid, charge.id, ${p.tenant}, ${p.eventType}, ${p.eventPayload}, ${p.traceparent}::text from charge
      returning 1
    )
    select (select got from lock) as got,
           (select count(*) from event)::int as created,
           e.request_hash, e.status, e.response_status, e.response_body
      from (select 1) as one
      left join existing as e on true`, endsAt);
  const row = rows[0];
  if (!row) throw new Error("bug: createCharge returned no row");
  return row;
}

/** One request of a batch: what createCharge takes, without the fields every request shares. */
export type BatchedCharge = Omit<CreateChargeParams, "endpoint" | "ttlSeconds" | "responseStatus" | "eventType">;

/** What every request of a batch shares. */
export interface BatchShared {
  readonly endpoint: string;
  readonly ttlSeconds: number;
  readonly responseStatus: number;
  readonly eventType: string;
}

/**
 * createCharge for several requests in ONE statement and one transaction: the same reads,
 * lock, writes and answer, row by row, each scoped to its own tenant and key. Rows come back
 * in the order of `charges`. Two requests for the same (tenant, key) must never share a
 * batch: the advisory lock is re-entrant within a transaction and ON CONFLICT may not touch
 * one row twice (the caller keeps them apart). The key lookup is a lateral subquery kept
 * from being flattened (offset 0), so each request reads the unique index, whatever the
 * planner guesses of the array's length.
 */
export async function createCharges(sql: Sql, shared: BatchShared, charges: readonly BatchedCharge[], endsAt = Number.POSITIVE_INFINITY): Promise<CreateChargeRow[]> {
  const column = <K extends keyof BatchedCharge>(name: K): BatchedCharge[K][] => charges.map((c) => c[name]);
  const rows = await settleBy(sql<CreateChargeRow[]>`
    with req as (
      select * from unnest(
        ${column("tenant")}::text[], ${column("key")}::text[], ${column("lockId")}::bigint[],
        ${column("requestHash")}::text[], ${column("chargeId")}::uuid[], ${column("amountCents")}::int[],
        ${column("createdAt")}::timestamptz[], ${column("responseBody")}::text[], ${column("eventId")}::uuid[],
        ${column("eventPayload")}::text[], ${column("traceparent")}::text[]
      ) with ordinality as r(tenant, key, lock_id, request_hash, charge_id, amount_cents, created_at,
                             response_body, event_id, payload, traceparent, n)
    ),
    existing as (
      select r.n, e.request_hash, e.status, e.response_status, e.response_body
        from req r
       cross join lateral (
         select request_hash, status, response_status, response_body
           from idempotency_keys
          where tenant = r.tenant and key = r.key and endpoint = ${shared.endpoint} and expires_at > now()
         offset 0
       ) as e
    ),
    lock as (
      select r.n, pg_try_advisory_xact_lock(r.lock_id) as got
        from req r
       where not exists (select 1 from existing x where x.n = r.n)
    ),
    claimed as (
      insert into idempotency_keys as k
             (tenant, key, endpoint, request_hash, status, response_status, response_body, expires_at)
      select r.tenant, r.key, ${shared.endpoint}, r.request_hash, 'COMPLETED', ${shared.responseStatus}::int,
             r.response_body, now() + make_interval(secs => ${shared.ttlSeconds}::int)
        from req r join lock l on l.n = r.n
       where l.got
      on conflict (tenant, key, endpoint) do update
         set request_hash = excluded.request_hash, status = excluded.status,
             response_status = excluded.response_status, response_body = excluded.response_body,
             created_at = now(), expires_at = excluded.expires_at
       where k.expires_at <= now()
      returning k.tenant, k.key
    ),
    charge as (
      insert into charges (id, tenant, amount_cents, created_at)
      select r.charge_id, r.tenant, r.amount_cents, r.created_at
        from req r join claimed c on c.tenant = r.tenant and c.key = r.key
      returning id
    ),
    event as (
      insert into outbox (id, aggregate_id, tenant, event_type, payload, traceparent)
      select r.event_id, c.id, r.tenant, ${shared.eventType}, r.payload, r.traceparent
        from charge c join req r on r.charge_id = c.id
      returning aggregate_id
    )
    select l.got,
           (exists (select 1 from event v where v.aggregate_id = r.charge_id))::int as created,
           e.request_hash, e.status, e.response_status, e.response_body
      from req r
      left join lock l on l.n = r.n
      left join existing e on e.n = r.n
     order by r.n`, endsAt);
  if (rows.length !== charges.length) throw new Error(`bug: createCharges returned ${rows.length} rows for ${charges.length} charges`);
  return rows;
}

/** The key row as committed now; used only after a lost race the statement above cannot see. */
export async function findKey(sql: Sql, tenant: string, key: string, endpoint: string, endsAt = Number.POSITIVE_INFINITY): Promise<StoredResponse | undefined> {
  const rows = await settleBy(sql<StoredResponse[]>`
    select request_hash, status, response_status, response_body
      from idempotency_keys
     where tenant = ${tenant} and key = ${key} and endpoint = ${endpoint} and expires_at > now()`, endsAt);
  return rows[0];
}

interface ChargeRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly created_at: Date;
}

/** Another tenant's charge is not found, exactly like an unknown id. */
export async function findCharge(sql: Sql, tenant: string, id: string, endsAt = Number.POSITIVE_INFINITY): Promise<ChargeRow | undefined> {
  const rows = await settleBy(sql<ChargeRow[]>`
    select id, amount_cents, created_at from charges where id = ${id}::uuid and tenant = ${tenant}`, endsAt);
  return rows[0];
}

// The statements of the charges API. One exported function per statement, `sql` first.
import type { Sql } from "../shared/db.ts";
import { settleBy } from "../shared/pool-gate.ts";

export interface StoredResponse {
  readonly request_hash: string;
  readonly status: "STARTED" | "COMPLETED";
  readonly response_status: number | null;
  readonly response_body: string | null;
}

interface CreateChargeParams {
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

interface CreateChargeRow {
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

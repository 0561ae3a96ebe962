// Key retention's statements: a COMPLETED key past its expiry becomes a tombstone (the answer
// dropped, the resource kept: a retry answers 410 and names it), and a tombstone past its end
// goes, so its key is new again. Bounded batches: a backlog never holds a long lock.
import type { Sql } from "../platform/db.ts";

/** A key row's endpoint and stored answer → the resource's Location, if the answer made one. */
export type Locate = (endpoint: string, status: number | null, body: string | null) => string | null;

interface DueKey {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
  readonly response_status: number | null;
  readonly response_body: string | null;
}

/**
 * Turns up to `batch` COMPLETED keys past their expiry into tombstones, keeping the resource's
 * Location and the completion time, expires_at moved on by `tombstoneSeconds` (out of the next
 * batch's index range). No transaction: the update is a compare-and-set on the state the read
 * saw, which only this job (under its lock) changes. Returns how many.
 */
export async function tombstoneExpiredKeys(sql: Sql, tombstoneSeconds: number, batch: number, locate: Locate): Promise<number> {
  const due = await sql<DueKey[]>`
    select tenant, key, endpoint, response_status, response_body
      from idempotency_keys
     where status = 'COMPLETED' and expires_at <= now()
     order by expires_at
     limit ${batch}`;
  if (due.length === 0) return 0;
  const rows = due.map((k) => ({ tenant: k.tenant, key: k.key, endpoint: k.endpoint, location: locate(k.endpoint, k.response_status, k.response_body) }));
  const result = await sql`
    update idempotency_keys k
       set status = 'EXPIRED', response_body = null, resume = null, location = t.location,
           completed_at = coalesce(k.completed_at, k.created_at),
           expires_at = k.expires_at + make_interval(secs => ${tombstoneSeconds}::int)
      from jsonb_to_recordset(${sql.json(rows as never)}) as t(tenant text, key text, endpoint text, location text)
     where k.tenant = t.tenant and k.key = t.key and k.endpoint = t.endpoint
       and k.status = 'COMPLETED' and k.expires_at <= now()`;
  return result.count;
}

/** Deletes up to `batch` tombstones past their end; returns how many. */
export async function deleteExpiredTombstones(sql: Sql, batch: number): Promise<number> {
  const result = await sql`
    delete from idempotency_keys
     where (tenant, key, endpoint) in (
       select tenant, key, endpoint from idempotency_keys
        where status = 'EXPIRED' and expires_at <= now()
        order by expires_at
        limit ${batch}
        for update skip locked)`;
  return result.count;
}


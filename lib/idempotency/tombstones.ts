// Key retention: an expired COMPLETED key becomes a tombstone (answer dropped, resource kept for the
// 410), and an expired tombstone goes. Bounded batches: a backlog never holds a long lock.
import type { Sql } from "../platform/db.ts";
import type { KeyRef, KeyRow } from "./skeleton.ts";

export type Locate = (endpoint: string, status: number | null, body: string | null) => string | null;

type DueKey = KeyRef & Pick<KeyRow, "response_status" | "response_body">;

/** No transaction: the update is a compare-and-set on what the read saw, which only this job changes. */
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


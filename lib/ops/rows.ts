// The operator's statements on parked outbox rows beside requeue (sql.ts): discard one, or
// release the aggregate a parked row holds back.
import type { Sql } from "../platform/db.ts";
import { isUuid } from "../platform/uuid.ts";

/**
 * Gives a parked row up: it is marked published without being sent, and keeps parked_at so
 * it reads as discarded, never as delivered. The rows its aggregate held behind it go on.
 * Returns how many rows (0 or 1).
 */
export async function discardRow(sql: Sql, id: string): Promise<number> {
  if (!isUuid(id)) return 0;
  const result = await sql`
    update outbox set published_at = now()
     where id = ${id}::uuid and parked_at is not null and published_at is null`;
  return result.count;
}

/**
 * Releases a held aggregate: every parked row of it back in line, attempts from zero, so that
 * its events go out again in sequence, the held ones after them. Returns how many were parked.
 */
export async function releaseAggregate(sql: Sql, aggregateId: string): Promise<number> {
  if (!isUuid(aggregateId)) return 0;
  const result = await sql`
    update outbox set parked_at = null, attempts = 0, releases = 0, next_attempt_at = null
     where aggregate_id = ${aggregateId}::uuid and parked_at is not null and published_at is null`;
  return result.count;
}

// The operations jobs' statements. Deletes go in bounded batches so a large backlog never
// holds a long lock or a long transaction.
import type { Sql } from "./db.ts";

/** Deletes up to `batch` COMPLETED keys past their expiry; returns how many. */
export async function deleteExpiredKeys(sql: Sql, batch: number): Promise<number> {
  const result = await sql`
    delete from idempotency_keys
     where (key, endpoint) in (
       select key, endpoint from idempotency_keys
        where status = 'COMPLETED' and expires_at <= now()
        order by expires_at
        limit ${batch}
        for update skip locked)`;
  return result.count;
}

export interface StaleKeys {
  readonly count: number;
  readonly oldestAgeSeconds: number;
  readonly sample: readonly { key: string; endpoint: string; ageSeconds: number }[];
}

/** STARTED keys older than `olderThanSeconds`: reported, never deleted. */
export async function staleStartedKeys(sql: Sql, olderThanSeconds: number, sampleSize: number): Promise<StaleKeys> {
  const [summary] = await sql<{ count: number; oldest: number | null }[]>`
    select count(*)::int as count, extract(epoch from now() - min(created_at))::float8 as oldest
      from idempotency_keys
     where status = 'STARTED' and created_at < now() - make_interval(secs => ${olderThanSeconds}::int)`;
  const sample = await sql<{ key: string; endpoint: string; ageSeconds: number }[]>`
    select key, endpoint, extract(epoch from now() - created_at)::float8 as "ageSeconds"
      from idempotency_keys
     where status = 'STARTED' and created_at < now() - make_interval(secs => ${olderThanSeconds}::int)
     order by created_at
     limit ${sampleSize}`;
  return { count: summary?.count ?? 0, oldestAgeSeconds: summary?.oldest ?? 0, sample };
}

export interface Orphans {
  readonly count: number;
  readonly sample: readonly string[];
}

/**
 * Charges with no outbox row: the atomicity alarm. Only charges younger than the outbox
 * retention are checked, since older ones have lost their published rows on purpose.
 */
export async function chargesWithoutOutbox(sql: Sql, windowSeconds: number, sampleSize: number): Promise<Orphans> {
  const rows = await sql<{ id: string; total: number }[]>`
    select c.id, count(*) over ()::int as total
      from charges c
     where c.created_at > now() - make_interval(secs => ${windowSeconds}::int)
       and not exists (select 1 from outbox o where o.aggregate_id = c.id)
     order by c.created_at
     limit ${sampleSize}`;
  return { count: rows[0]?.total ?? 0, sample: rows.map((r) => r.id) };
}

/** Deletes up to `batch` published outbox rows older than the retention; returns how many. */
export async function deletePublishedOutbox(sql: Sql, retentionSeconds: number, batch: number): Promise<number> {
  const result = await sql`
    delete from outbox
     where id in (
       select id from outbox
        where published_at is not null
          and published_at < now() - make_interval(secs => ${retentionSeconds}::int)
        order by published_at
        limit ${batch}
        for update skip locked)`;
  return result.count;
}

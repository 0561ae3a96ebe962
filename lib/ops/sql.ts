// The jobs' and the operator actions' statements on the outbox and the keys; the key rows' writes
// are the engine's (lib/idempotency/). Deletes go in batches, so no lock or transaction is long.
import type { Sql } from "../platform/db.ts";
import type { Fragment } from "../idempotency/model.ts";
import { isUuid } from "../platform/uuid.ts";

/** A STARTED key is stale once its lease has expired (its holder is gone), or, without one, once this old. */
export const staleLease = (sql: Sql, olderThanSeconds: number): Fragment =>
  sql`(lease_until <= now() or (lease_until is null and created_at < now() - make_interval(secs => ${olderThanSeconds}::int)))`;

export async function staleStartedSummary(sql: Sql, olderThanSeconds: number): Promise<{ count: number; oldestAgeSeconds: number }> {
  const [row] = await sql<{ count: number; oldest: number | null }[]>`
    select count(*)::int as count, extract(epoch from now() - min(created_at))::float8 as oldest
      from idempotency_keys
     where status = 'STARTED' and ${staleLease(sql, olderThanSeconds)}`;
  return { count: row?.count ?? 0, oldestAgeSeconds: row?.oldest ?? 0 };
}

export async function staleStartedSample(sql: Sql, olderThanSeconds: number, sampleSize: number) {
  return sql<{ key: string; endpoint: string; ageSeconds: number }[]>`
    select key, endpoint, extract(epoch from now() - created_at)::float8 as "ageSeconds"
      from idempotency_keys
     where status = 'STARTED' and ${staleLease(sql, olderThanSeconds)}
     order by created_at
     limit ${sampleSize}`;
}

/** Charges with no outbox row: the atomicity alarm; older ones than the retention lost theirs on purpose. */
export async function chargesWithoutOutbox(sql: Sql, windowSeconds: number, sampleSize: number): Promise<{ count: number; sample: string[] }> {
  const rows = await sql<{ id: string; total: number }[]>`
    select c.id, count(*) over ()::int as total
      from charges c
     where c.created_at > now() - make_interval(secs => ${windowSeconds}::int)
       and not exists (select 1 from outbox o where o.aggregate_id = c.id)
     order by c.created_at
     limit ${sampleSize}`;
  return { count: rows[0]?.total ?? 0, sample: rows.map((r) => r.id) };
}

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

// A target that is not an id matches nothing: a count of 0, not a 22P02 from the cast.
export function requeue(sql: Sql, target: string | "all"): Promise<number> {
  if (target === "all") return unpark(sql, sql``);
  return isUuid(target) ? unpark(sql, sql`id = ${target}::uuid and`) : Promise.resolve(0);
}

/** Every parked row of the aggregate back in line, so its events go out again in order. */
export function releaseAggregate(sql: Sql, aggregateId: string): Promise<number> {
  return isUuid(aggregateId) ? unpark(sql, sql`aggregate_id = ${aggregateId}::uuid and`) : Promise.resolve(0);
}

// Attempts start again from zero; the last error is kept for the record.
async function unpark(sql: Sql, which: Fragment): Promise<number> {
  const result = await sql`
    update outbox set parked_at = null, attempts = 0, releases = 0, next_attempt_at = null
     where ${which} parked_at is not null and published_at is null`;
  return result.count;
}

/** Marked published without being sent, parked_at kept so it reads as discarded; the held rows go on. */
export async function discardRow(sql: Sql, id: string): Promise<number> {
  if (!isUuid(id)) return 0;
  const result = await sql`
    update outbox set published_at = now()
     where id = ${id}::uuid and parked_at is not null and published_at is null`;
  return result.count;
}

export async function pendingStats(sql: Sql) {
  // One scalar sub-select per partial index: a scan "where published_at is null" would match neither.
  // Held rows come from the (few) parked ones; "is true" keeps the planner off the pending index.
  const [row] = await sql<{ pending: string; parked: string; held: string; oldest: number | null }[]>`
    select (select count(*) from outbox where published_at is null and parked_at is null) as pending,
           (select count(*) from outbox where published_at is null and parked_at is not null) as parked,
           (select count(distinct o.id)
              from outbox p
              join outbox o on o.aggregate_id = p.aggregate_id and o.aggregate_type = p.aggregate_type
             where p.published_at is null and p.parked_at is not null
               and o.sequence > p.sequence and (o.published_at is null and o.parked_at is null) is true) as held,
           (select extract(epoch from now() - min(created_at))::float8
              from outbox where published_at is null and parked_at is null) as oldest`;
  return {
    pending: Number(row?.pending ?? 0),
    parked: Number(row?.parked ?? 0),
    held: Number(row?.held ?? 0),
    oldestPendingAgeSeconds: row?.oldest ?? 0,
  };
}

const BACKLOG_MINUTES = 15;

/** The console's backlog chart: the outbox gauges and the rows published in each of the last minutes. */
export async function backlog(sql: Sql) {
  const stats = await pendingStats(sql);
  const rows = await sql<{ minute: Date; count: number }[]>`
    select date_trunc('minute', published_at) as minute, count(*)::int as count
      from outbox
     where published_at is not null and published_at > date_trunc('minute', now()) - make_interval(mins => ${BACKLOG_MINUTES - 1})
       and parked_at is null
     group by 1`;
  const [clock] = await sql<{ now: Date }[]>`select date_trunc('minute', now()) as now`;
  const now = clock!.now.getTime();
  const byMinute = new Map(rows.map((r) => [r.minute.getTime(), r.count]));
  // Oldest first, the current partial minute last.
  const publishedPerMinute = Array.from({ length: BACKLOG_MINUTES }, (_, i) => {
    const minute = now - (BACKLOG_MINUTES - 1 - i) * 60_000;
    return { minute: new Date(minute).toISOString(), count: byMinute.get(minute) ?? 0 };
  });
  return { at: new Date().toISOString(), ...stats, publishedPerMinute };
}

// The operations jobs' statements. Deletes go in bounded batches so a large backlog never
// holds a long lock or a long transaction. The key rows' writes (tombstones) are the engine's:
// lib/idempotency/tombstones.ts.
import type { Sql } from "../platform/db.ts";
import { isUuid } from "../platform/uuid.ts";

interface StaleKeysSummary {
  readonly count: number;
  readonly oldestAgeSeconds: number;
}

interface StaleKey {
  readonly key: string;
  readonly endpoint: string;
  readonly ageSeconds: number;
}

// Stale: a STARTED key whose lease has expired (its holder is gone, or gave up on an unknown
// outcome; the completer drives it on), or one without a lease (written by a release before
// leases) older than `olderThanSeconds`.
/** How many STARTED keys are stale, and the oldest one's age. */
export async function staleStartedSummary(sql: Sql, olderThanSeconds: number): Promise<StaleKeysSummary> {
  const [row] = await sql<{ count: number; oldest: number | null }[]>`
    select count(*)::int as count, extract(epoch from now() - min(created_at))::float8 as oldest
      from idempotency_keys
     where status = 'STARTED'
       and (lease_until <= now() or (lease_until is null and created_at < now() - make_interval(secs => ${olderThanSeconds}::int)))`;
  return { count: row?.count ?? 0, oldestAgeSeconds: row?.oldest ?? 0 };
}

/** The oldest `sampleSize` of those keys, to name them in the report. */
export async function staleStartedSample(sql: Sql, olderThanSeconds: number, sampleSize: number): Promise<StaleKey[]> {
  return sql<StaleKey[]>`
    select key, endpoint, extract(epoch from now() - created_at)::float8 as "ageSeconds"
      from idempotency_keys
     where status = 'STARTED'
       and (lease_until <= now() or (lease_until is null and created_at < now() - make_interval(secs => ${olderThanSeconds}::int)))
     order by created_at
     limit ${sampleSize}`;
}

interface Orphans {
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

/**
 * Puts parked rows back in line: attempts start again from zero, the last error is kept
 * for the record. `'all'` requeues every parked row. Returns how many rows were requeued.
 */
export async function requeue(sql: Sql, target: string | "all"): Promise<number> {
  // Not an id: nothing to requeue (a value, not a 22P02 from the cast).
  if (target !== "all" && !isUuid(target)) return 0;
  const result =
    target === "all"
      ? await sql`
          update outbox set parked_at = null, attempts = 0, releases = 0, next_attempt_at = null
          where parked_at is not null and published_at is null`
      : await sql`
          update outbox set parked_at = null, attempts = 0, releases = 0, next_attempt_at = null
          where id = ${target}::uuid and parked_at is not null and published_at is null`;
  return result.count;
}

interface PendingStats {
  readonly pending: number;
  readonly parked: number;
  /** Pending rows behind a parked row of their aggregate: the relay holds them until it is requeued. */
  readonly held: number;
  readonly oldestPendingAgeSeconds: number;
}

/** For the outbox gauges: rows not yet published (parked ones apart) and the oldest's age. */
export async function pendingStats(sql: Sql): Promise<PendingStats> {
  // Two scalar sub-selects, one per partial index (due rows, parked rows): a single scan
  // "where published_at is null" would match neither index and read the whole table.
  // The held rows are found from the parked ones (few) through the hash index on aggregate_id;
  // their test is wrapped in "is true" so that the planner cannot walk the pending index
  // instead (lib/relay/outbox-sql.ts, claimFollowers, says why).
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

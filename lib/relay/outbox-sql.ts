// The relay's SQL, one function per statement. Pipelined statements call execute(): a postgres.js
// query is otherwise sent when first awaited, a microtask later, and a COMMIT would overtake it.
import type { Sql, Tx } from "../platform/db.ts";

type Db = Sql | Tx;

export interface OutboxRow {
  readonly id: string;
  /** The ctid: the claim's row lock keeps the row in place until commit. */
  readonly tid: string;
  readonly aggregateId: string;
  readonly aggregateType: string;
  readonly sequence: number;
  readonly tenant: string;
  readonly eventType: string;
  readonly payload: string;
  /** ISO-8601 UTC with Postgres's microseconds (a JS Date would cut them). */
  readonly createdAt: string;
  readonly releases: number;
  readonly traceparent: string | null;
}

// Without statistics the planner would sort every pending row for a claim and seq-scan the updates.
// A crash without synchronous_commit loses only marks: those rows are published again (at least once).
export async function batchSettings(tx: Db): Promise<void> {
  await tx`select set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('synchronous_commit', 'off', true)`.execute();
}

// A head is its aggregate's oldest unpublished event.
function dueHeads(tx: Db, from: string | undefined) {
  return tx`
    select id, ctid::text as tid, aggregate_id as "aggregateId", aggregate_type as "aggregateType", sequence,
           tenant, event_type as "eventType", payload, releases, traceparent,
           to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"
    from outbox o
    where published_at is null
      and parked_at is null
      and (next_attempt_at is null or next_attempt_at <= now())
      ${from === undefined ? tx`` : tx`and created_at >= ${from}::timestamptz`}
      and (sequence = 1 or not exists (
        select 1 from outbox p
        where p.aggregate_id = o.aggregate_id and p.aggregate_type = o.aggregate_type
          and p.sequence < o.sequence and p.published_at is null))`;
}

/** Due rows walked, locked or not; of them sequence 1 rows; the last's created_at if the walk was full. */
type ClaimWindow = { readonly rows: number; readonly firstEvents: number; readonly end: string | undefined };

type ClaimedHeads = { readonly heads: OutboxRow[]; readonly window: ClaimWindow };

type HeadRow = OutboxRow & { readonly windowRows: number; readonly windowFirstEvents: number; readonly windowEnd: string | null };

// Any row but sequence 1 costs a probe on the aggregate_id index, hence the bounded walk: behind a
// backlog of one aggregate's events in flight every claim would probe all of it.
export async function claimHeads(tx: Db, limit: number, from?: string, walk: number = limit): Promise<ClaimedHeads> {
  // No head: one row of window figures and nulls.
  const rows = await tx<HeadRow[]>`
    with w as materialized (
      select created_at, sequence from outbox
      where published_at is null and parked_at is null
        and (next_attempt_at is null or next_attempt_at <= now())
        ${from === undefined ? tx`` : tx`and created_at >= ${from}::timestamptz`}
      order by created_at limit ${walk}),
    b as (select count(*)::int as n, count(*) filter (where sequence = 1)::int as first, max(created_at) as last from w)
    select b.n as "windowRows", b.first as "windowFirstEvents",
           case when b.n = ${walk} then to_char(b.last at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') end as "windowEnd",
           h.*
    from b left join lateral (
      ${dueHeads(tx, from)}
        and created_at <= case when b.n = ${walk} then b.last else 'infinity' end
      order by created_at
      limit ${limit}
      for update skip locked) as h on true`.execute();
  const first = rows[0];
  const window: ClaimWindow = { rows: first?.windowRows ?? 0, firstEvents: first?.windowFirstEvents ?? 0, end: first?.windowEnd ?? undefined };
  return { heads: first?.id == null ? [] : rows, window };
}

// For a backlog of sequence 1 rows only: no row costs a probe, so a window's second walk is pure cost.
export async function claimHeadsUnbounded(tx: Db, limit: number, from: string): Promise<ClaimedHeads> {
  const heads = await tx<OutboxRow[]>`
    ${dueHeads(tx, from)}
    order by created_at
    limit ${limit}
    for update skip locked`.execute();
  const firstEvents = heads.reduce((n, head) => (head.sequence === 1 ? n + 1 : n), 0);
  return { heads, window: { rows: heads.length, firstEvents, end: heads.length === limit ? heads.at(-1)?.createdAt : undefined } };
}

// `is true` hides the due test from the pending index's predicate, else the planner walks that
// index once per head; no ORDER BY, which with enable_sort off would be a scan.
export async function claimFollowers(tx: Db, heads: readonly OutboxRow[], limit: number): Promise<OutboxRow[]> {
  if (heads.length === 0 || limit <= 0) return [];
  return await tx<OutboxRow[]>`
    select f.id, f.ctid::text as tid, f.aggregate_id as "aggregateId", f.aggregate_type as "aggregateType", f.sequence,
           f.tenant, f.event_type as "eventType", f.payload, f.releases, f.traceparent,
           to_char(f.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"
    from unnest(${heads.map((h) => h.aggregateId)}::uuid[], ${heads.map((h) => h.aggregateType)}::text[],
                ${heads.map((h) => h.sequence)}::int[]) as h(aggregate_id, aggregate_type, sequence)
    join outbox f on f.aggregate_id = h.aggregate_id and f.aggregate_type = h.aggregate_type
    where f.sequence > h.sequence
      and f.published_at is null
      and (f.parked_at is null and (f.next_attempt_at is null or f.next_attempt_at <= now())) is true
    limit ${limit}
    for update of f skip locked`.execute();
}

// By the claim's `tid`: a TID scan, not a primary-key probe per row.
export async function markPublished(tx: Db, tids: readonly string[]): Promise<number> {
  if (tids.length === 0) return 0;
  const result = await tx`
    update outbox set published_at = now()
    where ctid = any(${tids as string[]}::tid[]) and published_at is null`.execute();
  return result.count;
}

/** `park`: retrying cannot help (e.g. PUBACK "not authorized"). */
export type Failure = Release & { readonly park: boolean };

/** Parked after `maxAttempts` failures; the back-off starts at `baseSeconds`, doubling. */
export type RetryPolicy = Readonly<{ maxAttempts: number; baseSeconds: number; maxSeconds: number }>;

export async function recordFailures(tx: Db, failures: readonly Failure[], policy: RetryPolicy): Promise<number> {
  if (failures.length === 0) return 0;
  const ids = failures.map((f) => f.id);
  const errors = failures.map((f) => f.error);
  // As text[]: postgres.js 3.4 sends a JS boolean[] as a scalar boolean.
  const parks = failures.map((f) => (f.park ? "true" : "false"));
  const result = await tx`
    update outbox as o set
      attempts = o.attempts + 1,
      last_error = f.error,
      next_attempt_at = now() + make_interval(secs =>
        least(${policy.maxSeconds}::float8, ${policy.baseSeconds}::float8 * power(2, o.attempts))),
      parked_at = case when f.park::boolean or o.attempts + 1 >= ${policy.maxAttempts} then now() end
    from unnest(${ids}::uuid[], ${errors}::text[], ${parks}::text[]) as f(id, error, park)
    where o.id = f.id and o.published_at is null`.execute();
  return result.count;
}

export type Release = { readonly id: string; readonly error: string };

/** A release counted, no attempt: the broker may just have gone away (outcome.ts suspect). */
export async function recordReleases(tx: Db, releases: readonly Release[]): Promise<number> {
  if (releases.length === 0) return 0;
  const ids = releases.map((r) => r.id);
  const errors = releases.map((r) => r.error);
  const result = await tx`
    update outbox as o set releases = o.releases + 1, last_error = f.error
    from unnest(${ids}::uuid[], ${errors}::text[]) as f(id, error)
    where o.id = f.id and o.published_at is null`.execute();
  return result.count;
}

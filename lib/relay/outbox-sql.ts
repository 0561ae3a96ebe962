// The relay's SQL, one function per statement. A batch runs claim → publish → marks in ONE
// transaction: the claim's row locks keep other relays and lanes off it until it settles.
// Pipelined statements call execute(): a postgres.js query is otherwise sent only when first
// awaited (a microtask later), and a COMMIT sent in between would overtake it.
import type { Sql, Tx } from "../platform/db.ts";

type Db = Sql | Tx;

export interface OutboxRow {
  readonly id: string;
  /** The ctid: the claim's row lock keeps the row in place until commit, so the mark finds it by this. */
  readonly tid: string;
  readonly aggregateId: string;
  readonly aggregateType: string;
  readonly sequence: number;
  readonly tenant: string;
  readonly eventType: string;
  /** JSON text of the event's `data`. */
  readonly payload: string;
  /** ISO-8601 UTC with Postgres's microseconds (a JS Date would cut them). */
  readonly createdAt: string;
  /** Times the row was the oldest publish in flight when the broker closed the connection. */
  readonly releases: number;
  readonly traceparent: string | null;
}

/**
 * The batch transaction's settings, pipelined with the claim. Without statistics (a fresh
 * table, a backlog outgrowing ANALYZE) the planner would sort every pending row for a claim
 * (enable_sort off keeps it walking the pending index) and seq-scan for the updates by id
 * (enable_seqscan off). synchronous_commit off: a crash loses only the bookkeeping of rows
 * already delivered, which are then published again, as at-least-once allows.
 */
export async function batchSettings(tx: Db): Promise<void> {
  await tx`select set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('synchronous_commit', 'off', true)`.execute();
}

// The first `walk` due rows from `from` (or the top of the pending index), locked or not.
function dueWindow(tx: Db, walk: number, from: string | undefined) {
  return tx`
    select created_at, sequence from outbox
    where published_at is null and parked_at is null
      and (next_attempt_at is null or next_attempt_at <= now())
      ${from === undefined ? tx`` : tx`and created_at >= ${from}::timestamptz`}
    order by created_at limit ${walk}`;
}

// The due heads from `from`, as OutboxRow's fields: a head is its aggregate's oldest unpublished event.
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

export interface ClaimWindow {
  /** The due rows in the window (at most `walk`), locked or not. */
  readonly rows: number;
  /** Of which sequence 1 rows (heads unless locked). */
  readonly firstEvents: number;
  /** The created_at of its last row when the window is full; undefined when fewer are due. */
  readonly end: string | undefined;
}

type ClaimedHeads = { readonly heads: OutboxRow[]; readonly window: ClaimWindow };

type HeadRow = OutboxRow & { readonly windowRows: number; readonly windowFirstEvents: number; readonly windowEnd: string | null };

/**
 * Locks (SKIP LOCKED) up to `limit` due heads among the first `walk` due rows from `from`, and
 * says what that window held. A row behind an unpublished one is no head: only its aggregate
 * waits. Any row but sequence 1 costs a probe on the aggregate_id index, hence the bounded walk:
 * behind a backlog of one aggregate's events in flight every claim would probe all of it.
 */
export async function claimHeads(tx: Db, limit: number, from?: string, walk: number = limit): Promise<ClaimedHeads> {
  // Named as OutboxRow's fields (no per-row copy). No head: one row of window figures and nulls.
  const rows = await tx<HeadRow[]>`
    with w as materialized (${dueWindow(tx, walk, from)}),
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

/**
 * claimHeads without a window, for a backlog of sequence 1 rows only (claim-lock.ts
 * WindowSize.unbounded): no row costs a probe, so the window's second walk would be pure cost.
 */
export async function claimHeadsUnbounded(tx: Db, limit: number, from: string): Promise<ClaimedHeads> {
  const heads = await tx<OutboxRow[]>`
    ${dueHeads(tx, from)}
    order by created_at
    limit ${limit}
    for update skip locked`.execute();
  let firstEvents = 0;
  for (const head of heads) if (head.sequence === 1) firstEvents++;
  return { heads, window: { rows: heads.length, firstEvents, end: heads.length === limit ? heads.at(-1)?.createdAt : undefined } };
}

/**
 * Locks up to `limit` due rows behind this claim's `heads` in their aggregates, unordered
 * (handover.ts orders the chains). Two forms keep this on the aggregate_id index: the due
 * test wrapped in `is true`, which the planner cannot match to the pending index's predicate
 * (else it walks that index once per head), and no ORDER BY (a scan with enable_sort off).
 */
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

/** The acknowledged rows, by the claim's `tid`: a TID scan, not a primary-key probe per row. */
export async function markPublished(tx: Db, tids: readonly string[]): Promise<number> {
  if (tids.length === 0) return 0;
  const result = await tx`
    update outbox set published_at = now()
    where ctid = any(${tids as string[]}::tid[]) and published_at is null`.execute();
  return result.count;
}

export interface Failure extends Release {
  /** Retrying cannot help (e.g. PUBACK "not authorized"): park at once. */
  readonly park: boolean;
}

export interface RetryPolicy {
  /** Failed attempts before the row is parked. */
  readonly maxAttempts: number;
  /** First back-off; doubles per attempt. */
  readonly baseSeconds: number;
  readonly maxSeconds: number;
}

/** Counts an attempt per failed row and schedules its retry, or parks it. */
export async function recordFailures(tx: Db, failures: readonly Failure[], policy: RetryPolicy): Promise<number> {
  if (failures.length === 0) return 0;
  const ids = failures.map((f) => f.id);
  const errors = failures.map((f) => f.error);
  // As text[]: postgres.js 3.4 sends a JS boolean[] as a scalar boolean, and serializes the
  // elements of a bool[] parameter from JS booleans only.
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

export interface Release {
  readonly id: string;
  readonly error: string;
}

/** Suspect rows (outcome.ts): a release counted, no attempt (the broker may just have gone away). */
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

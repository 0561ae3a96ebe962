// The relay's SQL: one exported function per statement, each taking the sql or the
// transaction first. The relay runs claim → (publish) → markPublished / recordFailures
// inside ONE transaction per batch, so the row locks taken by the claim are what keeps
// other relays (and other lanes of this relay) off the batch until it is settled.
//
// The statements the relay pipelines call execute(): a postgres.js query is otherwise sent
// only when first awaited (a microtask later), and a COMMIT sent in between would overtake it.
import type { Sql, Tx } from "../platform/db.ts";

type Db = Sql | Tx;

export interface OutboxRow {
  readonly id: string;
  /**
   * The row's place in the table (its ctid, as text). The claim's row lock keeps anyone from
   * updating, deleting or moving the row until the batch commits, so the mark can find it by
   * this without probing the primary key.
   */
  readonly tid: string;
  readonly aggregateId: string;
  /** The aggregate's type (`charge`): the event's topic level. */
  readonly aggregateType: string;
  /** The event's place among its aggregate's events, 1, 2, 3, … */
  readonly sequence: number;
  /** The tenant whose request wrote the row. */
  readonly tenant: string;
  readonly eventType: string;
  /** JSON text of the event's `data`. */
  readonly payload: string;
  /** created_at as ISO-8601 UTC with the microseconds Postgres keeps (a JS Date would cut them). */
  readonly createdAt: string;
  /** Times the row was the oldest publish in flight when the broker closed the connection. */
  readonly releases: number;
  readonly traceparent: string | null;
}

/**
 * The batch transaction's settings, sent with the claim (one statement, no round trip).
 *
 * The planner stays on the indexes. Without statistics (a fresh table, or a backlog that grew
 * faster than autovacuum's next ANALYZE) Postgres estimates one pending row, and then:
 *  - the claim (enable_sort = off) would bitmap-scan EVERY pending row and sort them instead
 *    of walking the pending index in created_at order and stopping after `limit` rows: each
 *    claim would cost in proportion to the backlog instead of the batch;
 *  - the UPDATEs of failed rows by `id = any(...)` (enable_seqscan = off) would scan the whole
 *    table instead of probing the primary key: each would cost in proportion to the table.
 *
 * The COMMIT does not wait for its WAL flush (synchronous_commit = off): what a batch commits
 * is bookkeeping of rows already delivered. A Postgres crash can lose the last few hundred
 * milliseconds of it; those rows are then published again, which at-least-once delivery
 * already allows and the subscriber's inbox absorbs; no event is lost, since the rows
 * themselves were committed durably by the API.
 */
export async function batchSettings(tx: Db): Promise<void> {
  await tx`select set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('synchronous_commit', 'off', true)`.execute();
}

// The due rows a claim looks at, in created_at order from `from` (or the top of the pending
// index): `walk` of them at most, locked or not.
function dueWindow(tx: Db, walk: number, from: string | undefined) {
  return tx`
    select created_at, sequence from outbox
    where published_at is null and parked_at is null
      and (next_attempt_at is null or next_attempt_at <= now())
      ${from === undefined ? tx`` : tx`and created_at >= ${from}::timestamptz`}
    order by created_at limit ${walk}`;
}

// The due heads from `from` (or the top of the pending index), as OutboxRow's fields: a head is
// its aggregate's oldest unpublished event (claimHeads says why and what it costs).
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
  /** Of which ChargeCreated rows (sequence 1: heads unless locked). */
  readonly firstEvents: number;
  /**
   * The created_at of its last row, as claimHeads returns created_at, when the window is full;
   * undefined when fewer are due (it reaches the end of the pending index).
   */
  readonly end: string | undefined;
}

/** A claim's heads and the window they were taken from. */
export interface ClaimedHeads {
  readonly heads: OutboxRow[];
  readonly window: ClaimWindow;
}

type HeadRow = OutboxRow & { readonly windowRows: number; readonly windowFirstEvents: number; readonly windowEnd: string | null };

/**
 * Locks the heads that are due among the first `walk` due rows from `from` (a created_at as
 * the claim returns it) or from the top of the pending index, `limit` at most, oldest first,
 * and says what that window held: one statement, the window walked once for both its figures
 * and its bound. A head is its aggregate's oldest unpublished event; a row behind an unpublished one (in
 * flight in another batch, backing off, parked) is not a head: it waits, and only its
 * aggregate waits with it. A `sequence` of 1 (every ChargeCreated) is a head without looking
 * further; any other row the walk passes costs a probe of its aggregate's rows (the hash index
 * on aggregate_id). The walk is bounded, or behind a backlog of one aggregate's events in
 * flight every claim would probe every row of the backlog; the next claim starts where this
 * window ended. SKIP LOCKED: rows another relay (or
 * lane) holds are passed over, never waited for. The scans follow the partial index on
 * pending rows; parked rows and rows still backing off are filtered out.
 */
export async function claimHeads(tx: Db, limit: number, from?: string, walk: number = limit): Promise<ClaimedHeads> {
  // Named as OutboxRow's fields in SQL: the rows come back in their final shape, with no
  // per-row copy on the drain's hot path (the window's three columns ride along). No head:
  // one row of the window's figures with nulls for the rest (the left join).
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
 * claimHeads without a window: the heads among the due rows from `from`, `limit` at most,
 * oldest first, the walk going on until it has them. What the relay claims with from the
 * frontier while its last claims found nothing but ChargeCreated rows (sequence 1, each a head
 * without a probe) and no other relay's locks (claim-lock.ts WindowSize.unbounded): the
 * window's bound is for walks that pass rows that are no heads, and such a backlog has none,
 * so the window's second walk would be pure cost. Its figures are the claim's own: every row
 * it took is a row of its walk.
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
 * Locks up to `limit` due rows that follow the `heads` of this transaction's claim in their
 * aggregates, so that a backlog of one aggregate's events does not take a claim per event.
 * The hand-over (handover.ts) publishes a follower only once the row before it is
 * acknowledged, and releases untouched one that does not come right after a row it has (the
 * limit or a locked row cut its chain): the rows need no order here.
 *
 * Two forms keep this on the hash index on aggregate_id: the due test is wrapped in `is true`,
 * which the planner cannot match to the predicate of the pending index (the plain form
 * matches it, and without statistics the planner walks the whole pending index once per
 * head); and no ORDER BY, which with enable_sort off turns the probe into a scan.
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

/**
 * The rows the broker acknowledged, by their `tid` from the claim of the same transaction, in
 * one statement: a TID scan, where matching the ids would cost a primary-key probe per row.
 */
export async function markPublished(tx: Db, tids: readonly string[]): Promise<number> {
  if (tids.length === 0) return 0;
  const result = await tx`
    update outbox set published_at = now()
    where ctid = any(${tids as string[]}::tid[]) and published_at is null`.execute();
  return result.count;
}

export interface Failure {
  readonly id: string;
  readonly error: string;
  /** True when retrying cannot help (e.g. a PUBACK "not authorized"): park at once. */
  readonly park: boolean;
}

export interface RetryPolicy {
  /** After this many failed attempts the row is parked. */
  readonly maxAttempts: number;
  /** First back-off; doubles with each attempt. */
  readonly baseSeconds: number;
  readonly maxSeconds: number;
}

/**
 * Counts an attempt on each failed row, records its error and schedules the retry with
 * exponential back-off; parks the rows that reached maxAttempts or can never succeed.
 * One statement for the whole batch.
 */
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

/**
 * Rows that were the oldest publish in flight when the broker closed the connection: one more
 * release counted and the error recorded, no attempt (the broker may just have gone away).
 */
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

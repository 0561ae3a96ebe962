// The relay's SQL: one exported function per statement, each taking the sql or the
// transaction first. The relay runs claim → (publish) → markPublished / recordFailures
// inside ONE transaction per batch, so the row locks taken by the claim are what keeps
// other relays (and other lanes of this relay) off the batch until it is settled.
//
// The statements the relay pipelines call execute(): a postgres.js query is otherwise sent
// only when first awaited (a microtask later), and a COMMIT sent in between would overtake it.
import type { Sql, Tx } from "../shared/db.ts";

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
  /**
   * The oldest unpublished event of its aggregate when claimed. A row that is not follows a
   * head of the same claim: it goes to the broker only after the row before it is acknowledged.
   */
  readonly head: boolean;
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
 * themselves were committed durably by the API. It measured a faster drain (bench/README.md,
 * "Relay drain").
 */
export async function batchSettings(tx: Db): Promise<void> {
  await tx`select set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('synchronous_commit', 'off', true)`.execute();
}

/**
 * Locks up to `limit` rows that are due, each aggregate's in sequence order. SKIP LOCKED: rows
 * another relay (or lane) holds are passed over, never waited for. Parked rows and rows still
 * backing off are filtered out.
 *
 * The heads come first: the oldest due rows, from `from` (a created_at as the claim returns
 * it) or from the top of the pending index, that are their aggregate's oldest unpublished
 * event. A row behind an unpublished one (in flight in another batch, backing off, parked)
 * is not a head: it waits, and only its aggregate waits with it. A `sequence` of 1 (every
 * ChargeCreated) is a head without looking further. Then, while the limit leaves room, the
 * followers: the due rows of the heads' aggregates, so that a backlog of one aggregate's
 * events does not take a claim per event. The hand-over (handover.ts) publishes a follower
 * only once the row before it is acknowledged, and releases untouched a follower that does
 * not come right after one it has (the limit or a locked row cut its chain).
 *
 * Every row the heads' walk passes that is not a ChargeCreated costs a probe of its
 * aggregate's rows (the hash index on aggregate_id), and, when the heads leave room, every
 * head a probe for followers. Two forms keep those probes on the hash index: the followers'
 * due test is wrapped in `is true`, which the planner cannot match to the predicate of the
 * pending index; the plain form matches it, and without statistics the planner walked the
 * whole pending index once per head. And the followers are not ordered: a sort there made the
 * planner, with enable_sort off, spend hundreds of milliseconds on a claim of ten rows.
 */
export async function claimBatch(tx: Db, limit: number, from?: string): Promise<OutboxRow[]> {
  // Named as OutboxRow's fields in SQL: the rows come back in their final shape, with no
  // per-row copy on the drain's hot path.
  return await tx<OutboxRow[]>`
    with heads as (
      select o.id, o.ctid, o.aggregate_id, o.aggregate_type, o.sequence, o.tenant, o.event_type, o.payload,
             o.releases, o.traceparent, o.created_at
      from outbox o
      where o.published_at is null
        and o.parked_at is null
        and (o.next_attempt_at is null or o.next_attempt_at <= now())
        ${from === undefined ? tx`` : tx`and o.created_at >= ${from}::timestamptz`}
        and (o.sequence = 1 or not exists (
          select 1 from outbox p
          where p.aggregate_id = o.aggregate_id and p.aggregate_type = o.aggregate_type
            and p.sequence < o.sequence and p.published_at is null))
      order by o.created_at
      limit ${limit}
      for update of o skip locked
    ), followers as (
      select f.id, f.ctid, f.aggregate_id, f.aggregate_type, f.sequence, f.tenant, f.event_type, f.payload,
             f.releases, f.traceparent, f.created_at
      from heads h
      join outbox f on f.aggregate_id = h.aggregate_id and f.aggregate_type = h.aggregate_type
      where f.sequence > h.sequence
        and f.published_at is null
        and (f.parked_at is null and (f.next_attempt_at is null or f.next_attempt_at <= now())) is true
      limit greatest(0, ${limit} - (select count(*) from heads))
      for update of f skip locked
    )
    select id, ctid::text as tid, aggregate_id as "aggregateId", aggregate_type as "aggregateType", sequence,
           tenant, event_type as "eventType", payload, releases, traceparent, head,
           to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"
    from (select *, true as head from heads union all select *, false from followers) as claimed`.execute();
}

/**
 * The rows the broker acknowledged, by their `tid` from the claim of the same transaction, in
 * one statement: a TID scan, where matching the ids cost a primary-key probe per row (the
 * Postgres CPU it saves: bench/README.md, "Relay drain").
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

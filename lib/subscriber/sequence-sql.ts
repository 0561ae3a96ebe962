// The subscriber's statements: inbox, places in each aggregate's sequence, held events, dead letters.
// Every statement that decides on an aggregate's place runs after its row is locked, in that transaction.
import type { Sql, Tx } from "../platform/db.ts";

export interface Place {
  readonly consumer: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
}

// Locks the aggregate's row (created at 0) and, when the event is next, records it in the inbox;
// `inserted` false with `last` = sequence - 1: the inbox had it. The upsert waits for the lock's
// holder, so share-group members take an aggregate's events in turn.
export async function claimTurn(tx: Tx, place: Place, eventId: string, sequence: number): Promise<{ last: number; inserted: boolean }> {
  const rows = await tx<{ last: number; inserted: boolean }[]>`
    with place as (${lockPlace(tx, place)}),
    turn as (
      insert into inbox (event_id, consumer)
      select ${eventId}::uuid, ${place.consumer} from place where last = ${sequence}::int - 1
      on conflict do nothing
      returning event_id)
    select (select last from place) as last, exists (select 1 from turn) as inserted`;
  return rows[0]!; // the upsert always returns its row
}

// A fragment too: claimTurn takes the lock in its own statement.
export function lockPlace(tx: Tx, place: Place) {
  return tx<{ last: number }[]>`
    insert into subscriber_sequences (consumer, aggregate_type, aggregate_id, last_sequence)
    values (${place.consumer}, ${place.aggregateType}, ${place.aggregateId}, 0)
    on conflict (consumer, aggregate_type, aggregate_id)
      do update set last_sequence = subscriber_sequences.last_sequence
    returning last_sequence as last`;
}

// Whether it has held events, which may now follow.
export async function advance(tx: Tx, place: Place, sequence: number): Promise<boolean> {
  const [row] = await tx<{ more: boolean }[]>`
    update subscriber_sequences s set last_sequence = ${sequence}, advanced_at = now()
     where consumer = ${place.consumer} and aggregate_type = ${place.aggregateType} and aggregate_id = ${place.aggregateId}
    returning exists (
      select 1 from subscriber_held_events h
       where h.consumer = s.consumer and h.aggregate_type = s.aggregate_type and h.aggregate_id = s.aggregate_id) as more`;
  return row?.more === true;
}

// false for a redelivery.
export async function recordInbox(tx: Tx, eventId: string, consumer: string): Promise<boolean> {
  const rows = await tx`
    insert into inbox (event_id, consumer) values (${eventId}::uuid, ${consumer})
    on conflict do nothing
    returning event_id`;
  return rows.length === 1;
}

export async function inboxHas(tx: Tx, eventId: string, consumer: string): Promise<boolean> {
  const rows = await tx`select 1 from inbox where event_id = ${eventId}::uuid and consumer = ${consumer}`;
  return rows.length === 1;
}

export type HeldEvent = Pick<DeadLetter, "eventId" | "topic" | "payload"> & { readonly sequence: number };

// false when it already is kept (a redelivery).
export async function holdEvent(tx: Tx, place: Place, held: HeldEvent): Promise<boolean> {
  const rows = await tx`
    insert into subscriber_held_events (event_id, consumer, aggregate_type, aggregate_id, sequence, topic, payload)
    values (${held.eventId}::uuid, ${place.consumer}, ${place.aggregateType}, ${place.aggregateId}, ${held.sequence}, ${held.topic}, ${held.payload})
    on conflict (event_id, consumer) do nothing
    returning event_id`;
  return rows.length === 1;
}

export type NextHeld = HeldEvent & {
  readonly overdue: boolean;
  /** Since the aggregate last advanced or its first held event came, whichever is later. */
  readonly waitedMs: number;
};

export async function nextHeld(tx: Tx, place: Place, timeoutMs: number): Promise<NextHeld | undefined> {
  const [row] = await tx<NextHeld[]>`
    select h.event_id as "eventId", h.sequence, h.topic, h.payload,
           g.since < now() - ${timeoutMs}::int * interval '1 millisecond' as overdue,
           (extract(epoch from now() - g.since) * 1000)::float8 as "waitedMs"
      from subscriber_held_events h
      join subscriber_sequences s
        on s.consumer = h.consumer and s.aggregate_type = h.aggregate_type and s.aggregate_id = h.aggregate_id
      cross join lateral (
        select greatest(s.advanced_at, min(m.held_at)) as since from subscriber_held_events m
         where m.consumer = h.consumer and m.aggregate_type = h.aggregate_type and m.aggregate_id = h.aggregate_id) g
     where h.consumer = ${place.consumer} and h.aggregate_type = ${place.aggregateType} and h.aggregate_id = ${place.aggregateId}
     order by h.sequence
     limit 1`;
  return row;
}

export async function deleteHeld(tx: Tx, eventId: string, consumer: string): Promise<void> {
  await tx`delete from subscriber_held_events where event_id = ${eventId}::uuid and consumer = ${consumer}`;
}

export interface DeadLetter {
  readonly eventId: string;
  readonly consumer: string;
  readonly topic: string;
  readonly payload: string;
  readonly error: string;
  readonly attempts: number;
}

/** A redelivery that fails again replaces the error and the time: the row says how it failed last. */
export function recordDeadLetter(sql: Sql | Tx, letter: DeadLetter) {
  return sql`
    insert into subscriber_dead_letters (event_id, consumer, topic, payload, error, attempts)
    values (${letter.eventId}::uuid, ${letter.consumer}, ${letter.topic}, ${letter.payload}, ${letter.error}, ${letter.attempts})
    on conflict (event_id, consumer) do update
      set topic = excluded.topic, payload = excluded.payload, error = excluded.error,
          attempts = excluded.attempts, dead_at = now()`;
}

export async function deadLetterHeld(sql: Sql | Tx, letter: DeadLetter): Promise<void> {
  await sql`
    with gone as (delete from subscriber_held_events where event_id = ${letter.eventId}::uuid and consumer = ${letter.consumer})
    ${recordDeadLetter(sql, letter)}`;
}

// Its turn came (a crash before its release) or its gap is overdue.
export async function dueAggregates(sql: Sql, consumer: string, timeoutMs: number, limit: number): Promise<Place[]> {
  return sql<Place[]>`
    select s.consumer, s.aggregate_type as "aggregateType", s.aggregate_id as "aggregateId"
      from subscriber_held_events h
      join subscriber_sequences s
        on s.consumer = h.consumer and s.aggregate_type = h.aggregate_type and s.aggregate_id = h.aggregate_id
     where h.consumer = ${consumer}
     group by s.consumer, s.aggregate_type, s.aggregate_id, s.last_sequence, s.advanced_at
    having min(h.sequence) <= s.last_sequence + 1
        or greatest(s.advanced_at, min(h.held_at)) < now() - ${timeoutMs}::int * interval '1 millisecond'
     limit ${limit}`;
}

export async function countHeld(sql: Sql, consumer: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from subscriber_held_events where consumer = ${consumer}`;
  return row?.n ?? 0;
}

export interface Gap {
  readonly place: Place;
  readonly last: number;
  /** The sequences held, lowest first (all above last + 1). */
  readonly held: readonly number[];
  readonly topic: string;
}

// Lasted `afterMs` but not `timeoutMs` (the sweep skips those), oldest first.
export async function gapsToFill(sql: Sql, consumer: string, aggregateType: string, afterMs: number, timeoutMs: number, limit: number): Promise<Gap[]> {
  const rows = await sql<{ aggregateId: string; last: number; held: number[]; topic: string }[]>`
    select s.aggregate_id as "aggregateId", s.last_sequence as last,
           array_agg(h.sequence order by h.sequence) as held,
           (array_agg(h.topic order by h.sequence))[1] as topic
      from subscriber_held_events h
      join subscriber_sequences s
        on s.consumer = h.consumer and s.aggregate_type = h.aggregate_type and s.aggregate_id = h.aggregate_id
     where h.consumer = ${consumer} and h.aggregate_type = ${aggregateType}
     group by s.aggregate_id, s.last_sequence, s.advanced_at
    having min(h.sequence) > s.last_sequence + 1
       and greatest(s.advanced_at, min(h.held_at)) <= now() - ${afterMs}::int * interval '1 millisecond'
       and greatest(s.advanced_at, min(h.held_at)) >= now() - ${timeoutMs}::int * interval '1 millisecond'
     order by greatest(s.advanced_at, min(h.held_at))
     limit ${limit}`;
  return rows.map((row) => ({ place: { consumer, aggregateType, aggregateId: row.aggregateId }, last: row.last, held: row.held, topic: row.topic }));
}

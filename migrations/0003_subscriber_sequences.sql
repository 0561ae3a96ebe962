-- Migration 0003: the reference subscriber keeps each aggregate's place in its sequence, so
-- that it processes the events of one aggregate in sequence order (docs/relay.md, "Order at
-- the subscriber"). Two new tables that nothing of the previous release reads or writes: it
-- can run while that release still serves. Runs once, in the transaction that records it in
-- the ledger, so its statements need not be idempotent.

-- Per consumer and aggregate, the sequence of the last event processed (0: none yet) and
-- when it last moved: a gap's wait is counted from then at the latest. Kept for as long as
-- the aggregate can have events (inbox retention leaves it), like the charge itself.
-- aggregate_id is text: the envelope's aggregateId as received, whatever its aggregate's keys.
create table subscriber_sequences (
    consumer text not null,
    aggregate_type text not null,
    aggregate_id text not null,
    last_sequence integer not null check (last_sequence >= 0),
    advanced_at timestamptz not null default now(),
    primary key (consumer, aggregate_type, aggregate_id)
);

-- Events that arrived ahead of their turn (an earlier event of their aggregate not processed
-- yet), acknowledged once kept here, and processed from here when their turn comes or their
-- gap times out. One row per (event, consumer): a redelivery of a held event changes nothing.
create table subscriber_held_events (
    event_id uuid not null,
    consumer text not null,
    aggregate_type text not null,
    aggregate_id text not null,
    sequence integer not null check (sequence >= 1),
    topic text not null,
    -- The message as received (the event envelope's JSON text).
    payload text not null,
    held_at timestamptz not null default now(),
    primary key (event_id, consumer)
);
-- An aggregate's next held event, and the gap sweep's scan of one consumer's held events.
create index subscriber_held_events_aggregate_idx on subscriber_held_events (consumer, aggregate_type, aggregate_id, sequence);

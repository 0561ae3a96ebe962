-- The charges service schema as it is now, whole: documentation, and the reference that
-- test/migrations.test.ts compares against. Processes never apply this file: they apply the
-- numbered files of migrations/ (lib/platform/migrations.ts), and the test proves that those,
-- from an empty database, give exactly this (tables, columns, constraints, indexes; the
-- ledger, schema_history, aside). A schema change is a new migration AND the same change
-- here, or that test fails.
--
-- The data contract: charges, idempotency_keys and outbox keep their names and columns;
-- columns are only ever added, never renamed or dropped. Indexes are not part of it: one
-- whose predicate must change is replaced by one under a new name and the old one dropped.
-- Columns are listed here in the order that reads best; in a migrated database a column a
-- later migration added comes last.

-- Tenants: every key, charge and event belongs to the tenant whose token wrote it (the event
-- carries it to subscribers). Rows written before tenants existed belong to 'default', which
-- is also the one tenant of AUTH_MODE=none, so such a deployment keeps its keys.

create table charges (
    id uuid primary key,
    tenant text not null default 'default',
    amount_cents integer not null check (amount_cents > 0),
    -- Every charge's refunded total, never above its amount: the last guard under the API's
    -- conditional update.
    refunded_cents integer not null default 0,
    -- The sequence of the charge's latest event: its ChargeCreated is 1, each refund the next.
    last_sequence integer not null default 1,
    created_at timestamptz not null default now(),
    -- With a payment processor (PAYMENT_PROCESSOR=stripe): 'pending' while the outcome is not
    -- known, then 'succeeded' (processor_payment_id) or 'failed' (decline_code). Without one,
    -- every charge is 'succeeded' at once.
    currency text not null default 'usd',
    status text not null default 'succeeded',
    processor_payment_id text,
    decline_code text,
    -- Refunds created at the processor and not yet confirmed: reserved against the amount.
    pending_refund_cents integer not null default 0,
    -- A manual charge ("capture": "manual") is 'authorized' until captured ('succeeded', with
    -- captured_cents, the rest released; 'capturing' while the processor's answer is not
    -- known) or canceled ('canceled'; 'canceling' meanwhile). Null for a charge captured at
    -- once: its whole amount. Refunds apply to it.
    captured_cents integer,
    constraint charges_refunded_within_amount check (refunded_cents between 0 and amount_cents),
    constraint charges_status_check check (status in ('pending', 'authorized', 'capturing', 'canceling', 'succeeded', 'failed', 'canceled')),
    constraint charges_captured_within_amount check (captured_cents is null or captured_cents between 1 and amount_cents),
    constraint charges_refunds_within_captured check (refunded_cents + pending_refund_cents <= coalesce(captured_cents, amount_cents)),
    constraint charges_reserved_within_amount check (pending_refund_cents >= 0 and refunded_cents + pending_refund_cents <= amount_cents)
);
-- Reconciliation reads the charges younger than the outbox retention; charges are kept for
-- ever, so without this index it reads them all.
create index charges_created_idx on charges (created_at);

create table refunds (
    id uuid primary key,
    charge_id uuid not null references charges(id),
    tenant text not null,
    amount_cents integer not null check (amount_cents > 0),
    created_at timestamptz not null default now(),
    -- Through a processor: 'pending' until the processor's refund is known.
    status text not null default 'succeeded',
    processor_refund_id text,
    failure_code text,
    constraint refunds_status_check check (status in ('pending', 'succeeded', 'failed'))
);

create table idempotency_keys (
    tenant text not null default 'default',
    key text not null,
    endpoint text not null,
    request_hash text not null,
    -- EXPIRED: a tombstone (migration 0008): the answer expired, the key is still spent.
    status text not null check (status in ('STARTED', 'COMPLETED', 'EXPIRED')),
    response_status integer,
    response_body text,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    -- A foreign step's bookkeeping (lib/idempotency/): the last step whose result was
    -- recorded and what it recorded, who may act on the key and until when, the completer's
    -- back-off, and when it was parked for an operator.
    recovery_point text,
    lease_token uuid,
    lease_until timestamptz,
    resume jsonb,
    attempts integer not null default 0,
    next_attempt_at timestamptz,
    last_error text,
    parked_at timestamptz,
    -- A tombstone's original resource (the stored answer's Location) and when the key completed.
    location text,
    completed_at timestamptz
);
-- Keys are unique per tenant: the target of the API's ON CONFLICT, and the safety net under
-- its advisory lock. Never unique on (key, endpoint) alone: a key one tenant used would make
-- every other tenant's request with it fail on a row it cannot see (a 409 for as long as the
-- key lives), which both blocks them and tells them the key exists.
create unique index idempotency_keys_tenant_key_endpoint_idx on idempotency_keys (tenant, key, endpoint);
-- Retention turns COMPLETED keys into tombstones at their expiry, and deletes tombstones at
-- theirs, both in bounded batches (a tombstone's expires_at is its own end, past the answer's).
create index idempotency_keys_expires_idx on idempotency_keys (expires_at);
-- The stale-STARTED check reads only STARTED keys: a handful at any time, however many
-- COMPLETED ones the table holds.
create index idempotency_keys_started_idx on idempotency_keys (created_at) where status = 'STARTED';
-- The completer's scan of STARTED keys by lease expiry.
create index idempotency_keys_lease_idx on idempotency_keys (lease_until) where status = 'STARTED';

-- Events to publish, written in the transaction of the change they announce. No foreign key
-- to charges: the outbox carries events of any aggregate and must not know their tables.
create table outbox (
    id uuid primary key,
    tenant text not null default 'default',
    -- The event's aggregate, its type and its per-aggregate sequence. The defaults (a
    -- charge's ChargeCreated) are what rows written before sequences existed are, and let an
    -- API of the previous release still write valid rows during a rolling upgrade.
    aggregate_type text not null default 'charge',
    aggregate_id uuid not null,
    sequence integer not null default 1,
    event_type text not null,
    payload text not null,
    -- W3C traceparent of the HTTP request that wrote the row, sent on as an MQTT 5 user property.
    traceparent text,
    created_at timestamptz not null default now(),
    published_at timestamptz,
    -- Delivery bookkeeping for the relay and the request's trace.
    attempts integer not null default 0,
    last_error text,
    -- A row whose last publish failed waits until then (back-off); null = ready now.
    next_attempt_at timestamptz,
    -- Set after too many failed attempts or a PUBACK reason that will never succeed: the
    -- relay skips the row until an operator requeues it (`bun run ops requeue`).
    parked_at timestamptz,
    -- Times the row was the oldest publish in flight when the broker closed the connection
    -- without an answer; the relay counts a failed attempt from the third such release on.
    releases integer not null default 0
);
-- The relay's claim walks this in created_at order: rows to publish, parked rows left out
-- (they are never deleted, and would otherwise be read and filtered by every claim). Rows
-- backing off (next_attempt_at in the future) are still in it: now() cannot be part of an
-- index predicate; they are few (only rows whose last publish failed within the back-off
-- cap) and each is passed over once per claim.
create index outbox_due_idx on outbox (created_at) where published_at is null and parked_at is null;
-- The parked gauge and `bun run ops requeue` read the parked rows alone.
create index outbox_parked_idx on outbox (parked_at) where published_at is null and parked_at is not null;
-- Outbox retention deletes published rows by age.
create index outbox_published_idx on outbox (published_at) where published_at is not null;
-- The reconciliation job looks charges up by aggregate, by equality only: a hash index. The
-- relay's mark is not a HOT update (published_at is in the partial indexes' predicates), so
-- every mark adds an entry to every index; into a B-tree of random UUIDs that entry costs a
-- descent, key comparisons and, on a full leaf, a failed bottom-up deletion and a split. Into
-- a hash index it is an append to one bucket: cheaper per row marked (bench/README.md,
-- "Relay drain").
create index outbox_aggregate_hash_idx on outbox using hash (aggregate_id);

-- The reference subscriber's inbox: one row per event id it has processed.
create table inbox (
    event_id uuid not null,
    consumer text not null,
    received_at timestamptz not null default now(),
    primary key (event_id, consumer)
);
-- Inbox retention deletes the oldest rows in bounded batches.
create index inbox_received_idx on inbox (received_at);

-- Events the reference subscriber gave up on after its retry budget: kept here, with the
-- last error, instead of vanishing. One row per (event, consumer); a redelivery that fails
-- again updates it.
create table subscriber_dead_letters (
    event_id uuid not null,
    consumer text not null,
    topic text not null,
    payload text not null,
    error text not null,
    attempts integer not null,
    dead_at timestamptz not null default now(),
    primary key (event_id, consumer)
);

-- Per consumer and aggregate, the sequence of the last event the reference subscriber
-- processed (0: none yet) and when it last moved: a gap's wait is counted from then at the
-- latest. Kept for as long as the aggregate can have events (inbox retention leaves it).
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
-- gap times out (SUBSCRIBER_GAP_TIMEOUT_MS). One row per (event, consumer).
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

-- The operators' audit trail: one row per action taken through the console or `bun run ops`
-- (who, through what, which action on which target, why, what came of it, when). Only added to.
create table operator_audit (
    id bigint generated always as identity primary key,
    at timestamptz not null default now(),
    actor text not null,
    via text not null,
    action text not null,
    target text not null,
    reason text not null,
    outcome jsonb not null,
    constraint operator_audit_reason_given check (length(btrim(reason)) > 0)
);
-- The console's audit page reads the newest first.
create index operator_audit_at_idx on operator_audit (at);

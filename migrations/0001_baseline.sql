-- Migration 0001: the baseline, the schema.sql of the last release before versioned
-- migrations, verbatim below this note. Every statement in it is idempotent ("if not exists", "if
-- exists"), so on a database of that release, which already has all of it, it changes
-- nothing; on anything older it performs the upgrades that file performed. Like every applied
-- migration it is never edited again: the ledger records its checksum and a changed byte stops
-- every process at start. The header below describes the old way of applying it.

-- The charges service schema. Applied at start-up by api.ts and relay.ts (and by
-- `bun run migrate`) under a Postgres advisory lock, so it must stay idempotent:
-- every statement is "if not exists" and columns are only ever added, never renamed
-- or dropped (charges, idempotency_keys and outbox keep their original names and columns).
-- Indexes are not part of that data contract: an index whose predicate must change is
-- replaced by one under a NEW name, followed by a "drop index if exists" of the old one.
-- Every index here is created inside the migration's transaction (not CONCURRENTLY): on a
-- table already large, create it beforehand with CREATE INDEX CONCURRENTLY under the same
-- name and the migration finds it in place.

create table if not exists charges (
    id uuid primary key,
    amount_cents integer not null check (amount_cents > 0),
    created_at timestamptz not null default now()
);

create table if not exists idempotency_keys (
    key text not null,
    endpoint text not null,
    request_hash text not null,
    status text not null check (status in ('STARTED', 'COMPLETED')),
    response_status integer,
    response_body text,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    unique (key, endpoint)
);

-- Retention deletes COMPLETED keys by expiry in bounded batches.
create index if not exists idempotency_keys_expires_idx on idempotency_keys (expires_at);
-- The stale-STARTED check reads only STARTED keys: a handful at any time, however many
-- COMPLETED ones the table holds.
create index if not exists idempotency_keys_started_idx
    on idempotency_keys (created_at)
    where status = 'STARTED';

-- Reconciliation reads the charges younger than the outbox retention; charges are kept for
-- ever, so without this index it reads them all.
create index if not exists charges_created_idx on charges (created_at);

create table if not exists outbox (
    id uuid primary key,
    aggregate_id uuid not null references charges(id),
    event_type text not null,
    payload text not null,
    created_at timestamptz not null default now(),
    published_at timestamptz
);

-- Delivery bookkeeping for the relay and the request's trace.
alter table outbox add column if not exists attempts integer not null default 0;
alter table outbox add column if not exists last_error text;
-- A row whose last publish failed waits until then (back-off); null = ready now.
alter table outbox add column if not exists next_attempt_at timestamptz;
-- Set after too many failed attempts or a PUBACK reason that will never succeed:
-- the relay skips the row until an operator requeues it (`bun run ops requeue`).
alter table outbox add column if not exists parked_at timestamptz;
-- W3C traceparent of the HTTP request that wrote the row, sent on as an MQTT 5 user property.
alter table outbox add column if not exists traceparent text;

-- The relay's claim walks this in created_at order: rows to publish, parked rows left out
-- (they are never deleted, and would otherwise be read and filtered by every claim).
-- Rows backing off (next_attempt_at in the future) are still in it: now() cannot be part of
-- an index predicate; they are few (only rows whose last publish failed within the back-off
-- cap) and each is passed over once per claim.
create index if not exists outbox_due_idx
    on outbox (created_at)
    where published_at is null and parked_at is null;
-- Replaced by outbox_due_idx, whose predicate leaves parked rows out.
drop index if exists outbox_pending_idx;
-- The parked gauge and `bun run ops requeue` read the parked rows alone.
create index if not exists outbox_parked_idx
    on outbox (parked_at)
    where published_at is null and parked_at is not null;

-- Outbox retention deletes published rows by age.
create index if not exists outbox_published_idx
    on outbox (published_at)
    where published_at is not null;
-- The reconciliation job looks charges up by aggregate, by equality only: a hash index. The
-- relay's mark is not a HOT update (published_at is in the partial indexes' predicates), so
-- every mark adds an entry to every index; into a B-tree of random UUIDs that entry costs a
-- descent, key comparisons and, on a full leaf, a failed bottom-up deletion and a split. Into
-- a hash index it is an append to one bucket: 2.5 µs less Postgres time per row marked
-- (bench/README.md).
create index if not exists outbox_aggregate_hash_idx on outbox using hash (aggregate_id);
-- Replaced by outbox_aggregate_hash_idx.
drop index if exists outbox_aggregate_idx;

-- Tenants: every key, charge and event belongs to the tenant whose token wrote it (the
-- event carries it to subscribers). Rows written before tenants existed belong to 'default',
-- which is also the one tenant of AUTH_MODE=none, so such a deployment keeps its keys.
alter table idempotency_keys add column if not exists tenant text not null default 'default';
alter table charges add column if not exists tenant text not null default 'default';
alter table outbox add column if not exists tenant text not null default 'default';
-- Keys are unique per tenant: the target of the API's ON CONFLICT, and the safety net under
-- its advisory lock.
create unique index if not exists idempotency_keys_tenant_key_endpoint_idx
    on idempotency_keys (tenant, key, endpoint);
-- The original unique (key, endpoint) has to go, or keys would stay global: a key one tenant
-- used would make every other tenant's request with it fail on a row it cannot see (a 409
-- for as long as the key lives), which both blocks them and tells them the key exists. It is
-- an index, replaced by the one above; no column is renamed or dropped. An API of the
-- previous version (ON CONFLICT (key, endpoint)) cannot write once it is gone: stop it first.
alter table idempotency_keys drop constraint if exists idempotency_keys_key_endpoint_key;

-- The reference subscriber's inbox: one row per event id it has processed.
create table if not exists inbox (
    event_id uuid not null,
    consumer text not null,
    received_at timestamptz not null default now(),
    primary key (event_id, consumer)
);
-- Inbox retention deletes the oldest rows in bounded batches.
create index if not exists inbox_received_idx on inbox (received_at);

-- Events the reference subscriber gave up on after its retry budget: kept here, with the
-- last error, instead of vanishing. One row per (event, consumer); a redelivery that fails
-- again updates it.
create table if not exists subscriber_dead_letters (
    event_id uuid not null,
    consumer text not null,
    topic text not null,
    payload text not null,
    error text not null,
    attempts integer not null,
    dead_at timestamptz not null default now(),
    primary key (event_id, consumer)
);

-- Times the row was the oldest publish in flight when the broker closed the connection
-- without an answer; the relay counts a failed attempt from the third such release on.
alter table outbox add column if not exists releases integer not null default 0;

-- The charges service schema. Applied at start-up by api.ts and relay.ts (and by
-- `bun run migrate`) under a Postgres advisory lock, so it must stay idempotent:
-- every statement is "if not exists" and columns are only ever added, never renamed
-- or dropped (the seed's three tables keep their names and columns).

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

create table if not exists outbox (
    id uuid primary key,
    aggregate_id uuid not null references charges(id),
    event_type text not null,
    payload text not null,
    created_at timestamptz not null default now(),
    published_at timestamptz
);

-- Added beyond the seed: delivery bookkeeping for the relay and the request's trace.
alter table outbox add column if not exists attempts integer not null default 0;
alter table outbox add column if not exists last_error text;
-- A row whose last publish failed waits until then (back-off); null = ready now.
alter table outbox add column if not exists next_attempt_at timestamptz;
-- Set after too many failed attempts or a PUBACK reason that will never succeed:
-- the relay skips the row until an operator requeues it (`bun run ops requeue`).
alter table outbox add column if not exists parked_at timestamptz;
-- W3C traceparent of the HTTP request that wrote the row, sent on as an MQTT 5 user property.
alter table outbox add column if not exists traceparent text;

-- The seed's partial index: only pending rows, so it stays small however big the table grows.
create index if not exists outbox_pending_idx
    on outbox (created_at)
    where published_at is null;

-- Outbox retention deletes published rows by age; the reconciliation job looks charges up by aggregate.
create index if not exists outbox_published_idx
    on outbox (published_at)
    where published_at is not null;
create index if not exists outbox_aggregate_idx on outbox (aggregate_id);

-- The reference subscriber's inbox: one row per event id it has processed.
create table if not exists inbox (
    event_id uuid not null,
    consumer text not null,
    received_at timestamptz not null default now(),
    primary key (event_id, consumer)
);

-- Times the row was the oldest publish in flight when the broker closed the connection
-- without an answer; the relay counts a failed attempt from the third such release on.
alter table outbox add column if not exists releases integer not null default 0;

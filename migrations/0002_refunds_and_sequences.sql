-- Migration 0002: refunds, and a per-aggregate sequence on every event. Runs once, in the
-- transaction that records it in the ledger, so its statements need not be idempotent.

-- every charge's refunded total, never above its amount (the last guard under the API's conditional update)
alter table charges add column refunded_cents integer not null default 0;
alter table charges add constraint charges_refunded_within_amount check (refunded_cents between 0 and amount_cents);
-- the sequence of the charge's latest event: its ChargeCreated is 1, each refund the next
alter table charges add column last_sequence integer not null default 1;
-- the event's aggregate type and per-aggregate sequence; rows written before sequences existed are each charge's ChargeCreated: 1.
-- The defaults stay so that an API of the previous release still writes valid rows during a rolling upgrade.
alter table outbox add column aggregate_type text not null default 'charge';
alter table outbox add column sequence integer not null default 1;
-- the outbox carries events of any aggregate: it must not know the charges table
alter table outbox drop constraint outbox_aggregate_id_fkey;
create table refunds (
    id uuid primary key,
    charge_id uuid not null references charges(id),
    tenant text not null,
    amount_cents integer not null check (amount_cents > 0),
    created_at timestamptz not null default now()
);

-- The previous release's ledger (one row per hash of the whole schema.sql) gives way to
-- schema_history. "if exists": a database created by this release never had it.
drop table if exists schema_migrations;

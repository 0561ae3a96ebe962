-- Migration 0004: charges and refunds through a payment processor (PAYMENT_PROCESSOR=stripe;
-- docs/api.md, "Charging through a payment processor"). Columns added with constant defaults
-- (no table rewrite), so the previous release keeps writing valid rows during a rolling
-- upgrade: its charges are 'succeeded' in the default currency, as they always were, and its
-- keys carry no lease. Runs once, in the transaction that records it in the ledger.

-- A charge's state at the processor: 'pending' while its outcome is not known, then
-- 'succeeded' (with the processor's payment id) or 'failed' (with the decline code).
alter table charges
    add column currency text not null default 'usd',
    add column status text not null default 'succeeded',
    add column processor_payment_id text,
    add column decline_code text,
    -- Refunds created at the processor but not yet confirmed: reserved against the amount,
    -- so that pending and concurrent refunds together never exceed it.
    add column pending_refund_cents integer not null default 0,
    add constraint charges_status_check check (status in ('pending', 'succeeded', 'failed')),
    add constraint charges_reserved_within_amount check (pending_refund_cents >= 0 and refunded_cents + pending_refund_cents <= amount_cents);

alter table refunds
    add column status text not null default 'succeeded',
    add column processor_refund_id text,
    add column failure_code text,
    add constraint refunds_status_check check (status in ('pending', 'succeeded', 'failed'));

-- The foreign step's bookkeeping on the key (lib/shared/foreign/): who holds the key now and
-- until when (a lease), how far its steps got (the recovery point, with what they recorded in
-- resume), and the completer's back-off and the operator's view.
alter table idempotency_keys
    add column recovery_point text,
    add column lease_token uuid,
    add column lease_until timestamptz,
    add column resume jsonb,
    add column attempts integer not null default 0,
    add column next_attempt_at timestamptz,
    add column last_error text,
    add column parked_at timestamptz;

-- The completer's scan: STARTED keys by lease expiry (a handful at any time).
create index idempotency_keys_lease_idx on idempotency_keys (lease_until) where status = 'STARTED';

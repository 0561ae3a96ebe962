-- Migration 0009: the operators' audit trail (docs/console.md, "The audit trail"). Every action
-- an operator takes through the console or `bun run ops` (resolve a parked key, requeue or
-- discard a parked outbox row, release a held aggregate) is one row: who, what, on which
-- target, why, what came of it and when. Rows are only ever added. A new table: nothing of the
-- previous release reads or writes it.

create table operator_audit (
    id bigint generated always as identity primary key,
    at timestamptz not null default now(),
    -- The operator: the `sub` of the console's token, or the CLI's OPS_ACTOR / login name.
    actor text not null,
    -- 'console' or 'cli'.
    via text not null,
    action text not null,
    -- The row or id acted on (an outbox row id, a charge or refund id, an aggregate id).
    target text not null,
    reason text not null,
    -- What came of it, as JSON (the action function's result).
    outcome jsonb not null,
    constraint operator_audit_reason_given check (length(btrim(reason)) > 0)
);
-- The console's audit page reads the newest first.
create index operator_audit_at_idx on operator_audit (at);

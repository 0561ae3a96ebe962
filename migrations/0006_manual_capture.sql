-- Migration 0006: authorize now, capture later (POST /charges with "capture": "manual",
-- POST /charges/:id/capture). A manual charge is 'authorized' until captured ('succeeded',
-- with captured_cents: what was captured, the rest released); 'capturing' while the
-- processor's answer to its capture is not known. captured_cents is null for a charge
-- captured at once: its whole amount. Refunds apply to what was captured.

alter table charges add column captured_cents integer;
alter table charges drop constraint charges_status_check;
alter table charges add constraint charges_status_check check (status in ('pending', 'authorized', 'capturing', 'succeeded', 'failed'));
alter table charges add constraint charges_captured_within_amount check (captured_cents is null or captured_cents between 1 and amount_cents);
alter table charges add constraint charges_refunds_within_captured check (refunded_cents + pending_refund_cents <= coalesce(captured_cents, amount_cents));

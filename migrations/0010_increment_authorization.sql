-- Migration 0010: a charge may be 'updating', its status while the payment processor is asked
-- to raise its authorization (POST /charges/:id/increment-authorization; docs/api.md): a capture
-- or a cancel of it is refused meanwhile, and phase 3 makes it 'authorized' again, at its new
-- amount or at the old one. The constraint is checked against every row, none of which changes.

alter table charges drop constraint charges_status_check;
alter table charges add constraint charges_status_check check (status in ('pending', 'authorized', 'capturing', 'canceling', 'updating', 'succeeded', 'failed', 'canceled'));

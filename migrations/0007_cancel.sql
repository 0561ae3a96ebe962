-- Migration 0007: POST /charges/:id/cancel. A manual charge's authorization released:
-- 'canceled'; 'canceling' while the processor's answer to its cancel is not known.

alter table charges drop constraint charges_status_check;
alter table charges add constraint charges_status_check check (status in ('pending', 'authorized', 'capturing', 'canceling', 'succeeded', 'failed', 'canceled'));

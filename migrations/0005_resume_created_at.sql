-- Migration 0005: the creation time in the resume of STARTED keys that the release of 0004 began.
-- Phase 3 now builds its response before its one statement, from the key's resume alone, and
-- this release's phase 1 writes the row's created_at there as `createdAt` (docs/api.md,
-- "Charging through a payment processor"). A key that release left STARTED (a crash, an
-- unknown outcome) is finished by this one: it gets the same value, read from its charge or
-- refund row, spelt as the API spells it (JavaScript's toISOString: UTC, milliseconds, "Z").
-- Data only, no schema change; the rows are the handful of unfinished keys.

update idempotency_keys k
   set resume = k.resume || jsonb_build_object('createdAt', to_char(c.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
  from charges c
 where k.status = 'STARTED' and k.endpoint = 'POST /charges' and k.resume is not null
   and not (k.resume ? 'createdAt')
   and c.id = (k.resume ->> 'chargeId')::uuid and c.tenant = k.tenant;

update idempotency_keys k
   set resume = k.resume || jsonb_build_object('createdAt', to_char(r.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
  from refunds r
 where k.status = 'STARTED' and k.endpoint = 'POST /charges/:id/refunds' and k.resume is not null
   and not (k.resume ? 'createdAt')
   and r.id = (k.resume ->> 'refundId')::uuid and r.tenant = k.tenant;

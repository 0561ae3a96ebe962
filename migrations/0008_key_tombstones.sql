-- Migration 0008: a tombstone for each key whose stored answer expired (docs/api.md, "Two
-- windows: the answer, then the tombstone"). The retention job no longer deletes a COMPLETED
-- key at its expiry: it turns it into an EXPIRED row (the scope, the fingerprint, the stored
-- status, the resource's Location and the completion time; no response body, no resume) whose
-- expires_at moves on by IDEMPOTENCY_TOMBSTONE_SECONDS, and deletes it once that has passed.
-- A request with such a key answers 410 Gone, never a second charge. Keys written before this
-- migration get their tombstone the same way when they expire: nothing here touches a row.
-- Both columns are nullable without a default: no table rewrite.

-- The original resource of a tombstone (the stored answer's Location), and when the key completed.
alter table idempotency_keys
    add column location text,
    add column completed_at timestamptz;

-- EXPIRED joins the key's states. Added NOT VALID, then validated: the validation reads the
-- table under a lock that lets writes go on.
alter table idempotency_keys drop constraint if exists idempotency_keys_status_check;
alter table idempotency_keys
    add constraint idempotency_keys_status_check check (status in ('STARTED', 'COMPLETED', 'EXPIRED')) not valid;
alter table idempotency_keys validate constraint idempotency_keys_status_check;

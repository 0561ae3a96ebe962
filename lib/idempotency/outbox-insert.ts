// The outbox insert of every statement that commits events: the ledger's single statement
// and phase 3 of processor steps (lib/idempotency/skeleton.ts).
// One place writes outbox rows, so both modes' events have one shape.
import type postgres from "postgres";
import type { Sql } from "../platform/db.ts";

/**
 * The CTE `event (id)`: one outbox row per row of `events (n, aggregate_type, aggregate_id,
 * sequence, event_type, payload)` whose request `won` (n, event_id, tenant, traceparent) holds.
 */
export function insertEvents(sql: Sql): postgres.Fragment {
  return sql`
    event as (
      insert into outbox (id, aggregate_type, aggregate_id, sequence, tenant, event_type, payload, traceparent)
      select w.event_id, e.aggregate_type, e.aggregate_id, e.sequence, w.tenant, e.event_type, e.payload, w.traceparent
        from events e join won w on w.n = e.n
      returning id
    )`;
}

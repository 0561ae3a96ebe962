// The reference subscriber's inbox: one row per (event id, consumer) it has processed.
import type { Sql, Tx } from "../shared/db.ts";

/**
 * Records the event as processed by this consumer; false when it already was (a redelivery).
 * Run it in the transaction that holds the consumer's own writes: both commit, or neither.
 */
export async function recordInbox(tx: Sql | Tx, eventId: string, consumer: string): Promise<boolean> {
  const rows = await tx`
    insert into inbox (event_id, consumer) values (${eventId}::uuid, ${consumer})
    on conflict do nothing
    returning event_id`;
  return rows.length === 1;
}

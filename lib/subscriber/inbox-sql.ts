// The reference subscriber's inbox: one row per (event id, consumer) it has processed.
import type { Sql, Tx } from "../platform/db.ts";

/** false for a redelivery. Run it in the transaction of the consumer's writes: both commit, or neither. */
export async function recordInbox(tx: Sql | Tx, eventId: string, consumer: string): Promise<boolean> {
  const rows = await tx`
    insert into inbox (event_id, consumer) values (${eventId}::uuid, ${consumer})
    on conflict do nothing
    returning event_id`;
  return rows.length === 1;
}

export interface DeadLetter {
  readonly eventId: string;
  readonly consumer: string;
  readonly topic: string;
  readonly payload: string;
  readonly error: string;
  readonly attempts: number;
}

/** A redelivery that fails again replaces the error and the time: the row says how it failed last. */
export async function recordDeadLetter(sql: Sql | Tx, letter: DeadLetter): Promise<void> {
  await sql`
    insert into subscriber_dead_letters (event_id, consumer, topic, payload, error, attempts)
    values (${letter.eventId}::uuid, ${letter.consumer}, ${letter.topic}, ${letter.payload}, ${letter.error}, ${letter.attempts})
    on conflict (event_id, consumer) do update
      set topic = excluded.topic, payload = excluded.payload, error = excluded.error,
          attempts = excluded.attempts, dead_at = now()`;
}

export async function deleteOldInbox(sql: Sql, retentionSeconds: number, batch: number): Promise<number> {
  const result = await sql`
    delete from inbox
     where (event_id, consumer) in (
       select event_id, consumer from inbox
        where received_at < now() - make_interval(secs => ${retentionSeconds}::int)
        order by received_at
        limit ${batch}
        for update skip locked)`;
  return result.count;
}

// Dead letters: an event the handler gave up on, or a message that is not a valid event, is kept
// in subscriber_dead_letters before it is acknowledged: nothing is acknowledged that is neither
// processed nor kept there.
import { createHash } from "node:crypto";
import type { IPublishPacket } from "mqtt";
import type { Sql, Tx } from "../platform/db.ts";

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

/**
 * The dead letter of a message that is not a valid event: under its own id when it names one,
 * else under an id made from its topic and bytes, so that a redelivery of it (a crash before
 * its PUBACK) updates the same row rather than adding one.
 */
export function malformedLetterOf(consumer: string, packet: IPublishPacket, reason: string, eventId: string | undefined): DeadLetter {
  const payload = payloadText(packet);
  return { eventId: eventId ?? contentId(packet.topic, payload), consumer, topic: packet.topic, payload, error: `malformed: ${reason}`, attempts: 0 };
}

// A UUID-shaped digest (the dead letters' key is a uuid); never a real event's id in practice.
function contentId(topic: string, payload: string): string {
  const hex = createHash("sha256").update(topic).update("\u0000").update(payload).digest("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** The message as received, as text (the envelope's JSON); NUL, which a text column refuses, as U+FFFD. */
export function payloadText(packet: IPublishPacket): string {
  const text = typeof packet.payload === "string" ? packet.payload : Buffer.from(packet.payload).toString("utf8");
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
}

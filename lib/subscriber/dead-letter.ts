// An event the handler gave up on is kept in subscriber_dead_letters before it is
// acknowledged: nothing is acknowledged that is neither processed nor kept there.
import { createHash } from "node:crypto";
import type { IPublishPacket } from "mqtt";
import { describeDbError, type Sql } from "../platform/db.ts";
import type { EventEnvelope } from "../charges/events.ts";
import { recordDeadLetter, type DeadLetter } from "./inbox-sql.ts";

import { retryWithBackoff } from "./retry.ts";

/** The dead letter for `event`, received as `packet`, on which the handler last failed with `error`. */
export function deadLetterOf(consumer: string, packet: IPublishPacket, event: EventEnvelope, error: unknown, attempts: number): DeadLetter {
  return { eventId: event.id, consumer, topic: packet.topic, payload: payloadText(packet), error: describeDbError(error), attempts };
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

export interface DeadLetterStore {
  readonly sql: Sql;
  readonly onError?: (description: string) => void;
  /** True once the subscriber closes: retries stop with `Closing`. */
  readonly closing: () => boolean;
}

/** Writes the dead letter, retried until it is written (or the subscriber closes): never acknowledged unwritten. */
export function keepDeadLetter(store: DeadLetterStore, letter: DeadLetter): Promise<void> {
  return keepDeadLetterWith(store, letter, recordDeadLetter);
}

/** The same, with the statement that writes it (a held event's also takes it out of the held ones). */
export function keepDeadLetterWith(store: DeadLetterStore, letter: DeadLetter, write: (sql: Sql, letter: DeadLetter) => Promise<void>): Promise<void> {
  return retryWithBackoff(() => write(store.sql, letter), {
    closing: store.closing,
    onFailure: (error) => store.onError?.(`event ${letter.eventId}: dead letter not written yet: ${describeDbError(error)}`),
  });
}

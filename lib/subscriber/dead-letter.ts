// An event the handler gave up on is kept in subscriber_dead_letters before it is
// acknowledged: nothing is acknowledged that is neither processed nor kept there.
import type { IPublishPacket } from "mqtt";
import { describeDbError, type Sql } from "../platform/db.ts";
import type { EventEnvelope } from "../charges/events.ts";
import { recordDeadLetter, type DeadLetter } from "./inbox-sql.ts";
import { MAX_HANDLER_ATTEMPTS } from "./process.ts";
import { retryWithBackoff } from "./retry.ts";

/** The dead letter for `event`, received as `packet`, on which the handler last failed with `error`. */
export function deadLetterOf(consumer: string, packet: IPublishPacket, event: EventEnvelope, error: unknown): DeadLetter {
  return { eventId: event.id, consumer, topic: packet.topic, payload: payloadText(packet), error: describeDbError(error), attempts: MAX_HANDLER_ATTEMPTS };
}

/** The message as received, as text (the envelope's JSON). */
export function payloadText(packet: IPublishPacket): string {
  return typeof packet.payload === "string" ? packet.payload : Buffer.from(packet.payload).toString("utf8");
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

// One event through the inbox: in ONE transaction, the inbox row and the handler's writes (a
// conflict on the inbox row: already processed, handler skipped). An event with a sequence waits
// for its aggregate's row lock, then is processed, dropped, held (ahead of its turn) or kept as a
// dead letter (its turn was skipped). Retried while the database is away.
import { isUnavailable, describeDbError, type Sql, type Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import type { EventEnvelope } from "../charges/events.ts";
import { recordDeadLetter, recordInbox, type DeadLetter } from "./inbox-sql.ts";
import { advance, claimTurn, holdEvent, inboxHas, type Place } from "./sequence-sql.ts";
import { retryWithBackoff } from "./retry.ts";

// Only a handler's own failures count (not the database being away), so one poison event cannot
// stall the stream: it goes to the dead letters.
export const MAX_HANDLER_ATTEMPTS = 5;

export interface Processing {
  readonly sql: Sql;
  readonly consumer: string;
  readonly handler?: (event: EventEnvelope, tx: Tx) => Promise<void> | void;
  readonly onError?: (description: string) => void;
  readonly closing: () => boolean;
  readonly maxHandlerAttempts?: number;
}

export function handlerAttempts(processing: Pick<Processing, "maxHandlerAttempts">): number {
  return processing.maxHandlerAttempts ?? MAX_HANDLER_ATTEMPTS;
}

export type SequencedEvent = EventEnvelope & { readonly sequence: number };

/** A received event, with its aggregate's place when it has a sequence. */
export type Arrival =
  | { readonly ordered: false; readonly event: EventEnvelope }
  | { readonly ordered: true; readonly event: SequencedEvent; readonly place: Place; readonly topic: string; readonly payload: string };

export type Outcome =
  /** `follow`: the aggregate whose held events may follow now, if it has any. */
  | { readonly kind: "processed" | "duplicate"; readonly follow?: Place }
  /** Ahead of its turn, kept in subscriber_held_events; `fresh` false for a redelivery of one held already. */
  | { readonly kind: "held"; readonly place: Place; readonly event: SequencedEvent; readonly expected: number; readonly fresh: boolean }
  /** Behind its turn and never processed: its gap was skipped; kept in subscriber_dead_letters as `letter`. */
  | { readonly kind: "late"; readonly place: Place; readonly event: SequencedEvent; readonly last: number; readonly letter: DeadLetter };

export type Turn = "next" | "past" | "ahead";

export function turnOf(last: number, sequence: number): Turn {
  if (sequence === last + 1) return "next";
  return sequence <= last ? "past" : "ahead";
}

/**
 * Runs `attempt` until it succeeds; resolves to its value. Rejects with the handler's last
 * error after handlerAttempts(processing) of its own failures, or with `Closing`.
 */
export function withHandlerBudget<T>(processing: Processing, what: () => string, attempt: () => Promise<T>): Promise<T> {
  // Only the handler's own failures spend its budget, not the database being away.
  let failures = 0;
  return retryWithBackoff(attempt, {
    closing: processing.closing,
    onFailure: (error, n) => {
      // A server gone read-only (a failover): the retry must find the one that writes.
      if (isReadOnly(error)) void dropReadOnlyConnections(processing.sql);
      if (!isUnavailable(error) && ++failures >= handlerAttempts(processing)) throw error;
      processing.onError?.(`${what()}: attempt ${n} failed: ${describeDbError(error)}`);
    },
  });
}

export function processEvent(processing: Processing, arrival: Arrival): Promise<Outcome> {
  // Postgres may go away mid-transaction: the attempt fails, the retry finds a new connection.
  // `transaction` (not sql.begin) so that a statement is never sent on the dead connection,
  // which postgres.js answers with an uncatchable error ending the process.
  const attempt = (): Promise<Outcome> =>
    transaction(processing.sql, (tx) => (arrival.ordered ? inTurn(tx, processing, arrival) : unordered(tx, processing, arrival.event)));
  return withHandlerBudget(processing, () => `event ${arrival.event.id}`, attempt);
}

/** An envelope without a sequence (from a relay that kept none): as the inbox always did. */
async function unordered(tx: Tx, processing: Processing, event: EventEnvelope): Promise<Outcome> {
  const fresh = await recordInbox(tx, event.id, processing.consumer);
  if (fresh) await processing.handler?.(event, tx);
  return { kind: fresh ? "processed" : "duplicate" };
}

type OrderedArrival = Extract<Arrival, { ordered: true }>;

// In its turn: two round trips besides the handler.
async function inTurn(tx: Tx, processing: Processing, arrival: OrderedArrival): Promise<Outcome> {
  const { event, place } = arrival;
  const { last, inserted } = await claimTurn(tx, place, event.id, event.sequence);
  if (inserted) {
    await processing.handler?.(event, tx);
    return { kind: "processed", ...(await following(tx, place, event.sequence)) };
  }
  const turn = turnOf(last, event.sequence);
  // Next in line, yet in the inbox: processed while its consumer kept no sequences.
  if (turn === "next") return { kind: "duplicate", ...(await following(tx, place, event.sequence)) };
  // Read after the lock: whatever the aggregate's previous holder committed is seen.
  if (await inboxHas(tx, event.id, place.consumer)) return { kind: "duplicate" };
  switch (turn) {
    case "past": {
      const letter = lateLetter(arrival, last);
      await recordDeadLetter(tx, letter);
      return { kind: "late", place, event, last, letter };
    }
    case "ahead": {
      const fresh = await holdEvent(tx, place, { eventId: event.id, sequence: event.sequence, topic: arrival.topic, payload: arrival.payload });
      return { kind: "held", place, event, expected: last + 1, fresh };
    }
  }
}

async function following(tx: Tx, place: Place, sequence: number): Promise<{ follow?: Place }> {
  return (await advance(tx, place, sequence)) ? { follow: place } : {};
}

export function lateLetter(arrival: { event: SequencedEvent; place: Place; topic: string; payload: string }, last: number): DeadLetter {
  const error = `late: sequence ${arrival.event.sequence} came after its aggregate went on to ${last} (its gap was skipped after the gap timeout); not processed out of order`;
  return { eventId: arrival.event.id, consumer: arrival.place.consumer, topic: arrival.topic, payload: arrival.payload, error, attempts: 0 };
}

// One event through the inbox: in ONE transaction, the inbox row and the handler's own writes;
// a conflict on the inbox row means "already processed" and the handler is skipped. An event
// with a sequence is processed in its aggregate's turn: the aggregate's row is locked first,
// then the event is processed (next in line), dropped (already processed), held (ahead of its
// turn) or kept as a dead letter (its turn was skipped). Retried while the database is away; a
// handler that keeps failing is given up on.
import { isUnavailable, describeDbError, type Sql, type Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import type { EventEnvelope } from "../charges/events.ts";
import { recordDeadLetter, recordInbox, type DeadLetter } from "./inbox-sql.ts";
import { advance, claimTurn, holdEvent, inboxHas, type Place } from "./sequence-sql.ts";
import { retryWithBackoff } from "./retry.ts";

// A handler that keeps failing (not the database being away) is given up after this many
// attempts, so one poison event cannot stall the stream; the event then goes to the
// dead-letter table.
export const MAX_HANDLER_ATTEMPTS = 5;

export interface Processing {
  readonly sql: Sql;
  readonly consumer: string;
  readonly handler?: (event: EventEnvelope, tx: Tx) => Promise<void> | void;
  readonly onError?: (description: string) => void;
  /** True once the subscriber closes: retries stop with `Closing`. */
  readonly closing: () => boolean;
  /** The handler's budget of failures before its event is a dead letter (MAX_HANDLER_ATTEMPTS by default). */
  readonly maxHandlerAttempts?: number;
}

/** How many handler failures make a dead letter. */
export function handlerAttempts(processing: Pick<Processing, "maxHandlerAttempts">): number {
  return processing.maxHandlerAttempts ?? MAX_HANDLER_ATTEMPTS;
}

export type SequencedEvent = EventEnvelope & { readonly sequence: number };

/** A received event: with its aggregate's place when it has a sequence, as before sequences when not. */
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

/** Where a sequence stands against its aggregate's last processed one. */
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

/** The transaction, retried (see withHandlerBudget). */
export function processEvent(processing: Processing, arrival: Arrival): Promise<Outcome> {
  // Postgres may go away mid-transaction: the attempt fails, the retry finds a new connection.
  // `transaction` (not sql.begin) so that a statement is never sent on the dead connection,
  // which postgres.js answers with an uncatchable error ending the process.
  const attempt = (): Promise<Outcome> =>
    transaction(processing.sql, (tx) => (arrival.ordered ? inTurn(tx, processing, arrival) : unordered(tx, processing, arrival.event)));
  return withHandlerBudget(processing, () => `event ${arrival.event.id}`, attempt);
}

/** An envelope without a sequence (from a relay older than sequences): as the inbox always did. */
async function unordered(tx: Tx, processing: Processing, event: EventEnvelope): Promise<Outcome> {
  const fresh = await recordInbox(tx, event.id, processing.consumer);
  if (fresh) await processing.handler?.(event, tx);
  return { kind: fresh ? "processed" : "duplicate" };
}

type OrderedArrival = Extract<Arrival, { ordered: true }>;

// In its turn: two round trips besides the handler (the lock with the inbox row, the advance).
async function inTurn(tx: Tx, processing: Processing, arrival: OrderedArrival): Promise<Outcome> {
  const { event, place } = arrival;
  const { last, inserted } = await claimTurn(tx, place, event.id, event.sequence);
  if (inserted) {
    await processing.handler?.(event, tx);
    return { kind: "processed", ...(await following(tx, place, event.sequence)) };
  }
  const turn = turnOf(last, event.sequence);
  // Next in line, yet in the inbox: processed before its consumer kept sequences.
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

/** Advances the aggregate to `sequence`; names it when it has held events that may follow. */
async function following(tx: Tx, place: Place, sequence: number): Promise<{ follow?: Place }> {
  return (await advance(tx, place, sequence)) ? { follow: place } : {};
}

/** The dead letter of an event that came after its aggregate went past it: the handler never ran. */
export function lateLetter(arrival: { event: SequencedEvent; place: Place; topic: string; payload: string }, last: number): DeadLetter {
  const error = `late: sequence ${arrival.event.sequence} came after its aggregate went on to ${last} (its gap was skipped after the gap timeout); not processed out of order`;
  return { eventId: arrival.event.id, consumer: arrival.place.consumer, topic: arrival.topic, payload: arrival.payload, error, attempts: 0 };
}

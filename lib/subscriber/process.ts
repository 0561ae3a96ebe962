// One event through the inbox: the inbox row and the handler's writes in ONE transaction; with a
// sequence, under its aggregate's row lock: processed, dropped, held, or a dead letter when late.
import { isUnavailable, describeDbError, type Sql, type Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { dropReadOnlyConnections, isReadOnly } from "../platform/read-only.ts";
import { parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import type { Report } from "./report.ts";
import { advance, claimTurn, deadLetterHeld, deleteHeld, holdEvent, inboxHas, lockPlace, nextHeld } from "./sequence-sql.ts";
import { recordDeadLetter, recordInbox, type DeadLetter, type NextHeld, type Place } from "./sequence-sql.ts";
import type { SequencedEvent, SubscriberOptions } from "./types.ts";

const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5000;

// A handler's own failures (not the database away): one poison event cannot stall the stream.
export const MAX_HANDLER_ATTEMPTS = 5;

export type Processing = Pick<SubscriberOptions, "sql" | "consumer" | "handler" | "onError"> & {
  readonly maxHandlerAttempts: number;
  readonly closing: () => boolean;
};

export type Arrival =
  | { readonly ordered: false; readonly event: EventEnvelope }
  | { readonly ordered: true; readonly event: SequencedEvent; readonly place: Place; readonly topic: string; readonly payload: string };

type OrderedArrival = Extract<Arrival, { ordered: true }>;

export type Outcome =
  /** `follow`: the aggregate whose held events may follow now, if it has any. */
  | { readonly kind: "processed" | "duplicate"; readonly follow?: Place }
  /** `fresh` false for a redelivery of one held already. */
  | { readonly kind: "held"; readonly place: Place; readonly event: SequencedEvent; readonly expected: number; readonly fresh: boolean }
  /** Behind its turn and never processed (its gap was skipped): kept as `letter`. */
  | { readonly kind: "late"; readonly place: Place; readonly event: SequencedEvent; readonly last: number; readonly letter: DeadLetter };

/** The subscriber is closing: the event in hand gets no PUBACK and comes back in the next session. */
export class Closing extends Error {}

// The database away is retried for as long as it takes; `onFailure` throwing gives up.
async function retryWithBackoff<T>(attempt: () => Promise<T>, closing: () => boolean, onFailure: (error: unknown, n: number) => void): Promise<T> {
  let pause = RETRY_MIN_MS;
  for (let n = 1; ; n += 1) {
    if (closing()) throw new Closing();
    try {
      return await attempt();
    } catch (error) {
      onFailure(error, n);
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(RETRY_MAX_MS, pause * 2);
    }
  }
}

export function turnOf(last: number, sequence: number): "next" | "past" | "ahead" {
  if (sequence === last + 1) return "next";
  return sequence <= last ? "past" : "ahead";
}

/** Rejects with the handler's last error once its budget is spent, or with `Closing`. */
export function withHandlerBudget<T>(processing: Processing, what: () => string, attempt: () => Promise<T>): Promise<T> {
  let failures = 0;
  return retryWithBackoff(attempt, processing.closing, (error, n) => {
    // A server gone read-only (a failover): the retry must find the one that writes.
    if (isReadOnly(error)) void dropReadOnlyConnections(processing.sql);
    if (!isUnavailable(error) && ++failures >= processing.maxHandlerAttempts) throw error;
    processing.onError?.(`${what()}: attempt ${n} failed: ${describeDbError(error)}`);
  });
}

export function processEvent(processing: Processing, arrival: Arrival): Promise<Outcome> {
  // `transaction` (not sql.begin): after a lost connection no statement is sent on it, which
  // postgres.js answers with an uncatchable error ending the process.
  const attempt = (): Promise<Outcome> =>
    transaction(processing.sql, (tx) => (arrival.ordered ? inTurn(tx, processing, arrival) : unordered(tx, processing, arrival.event)));
  return withHandlerBudget(processing, () => `event ${arrival.event.id}`, attempt);
}

async function unordered(tx: Tx, processing: Processing, event: EventEnvelope): Promise<Outcome> {
  const fresh = await recordInbox(tx, event.id, processing.consumer);
  if (fresh) await processing.handler?.(event, tx);
  return { kind: fresh ? "processed" : "duplicate" };
}

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
  if (turn === "past") return { kind: "late", place, event, last, letter: await keepLate(tx, arrival, last) };
  const fresh = await holdEvent(tx, place, { eventId: event.id, sequence: event.sequence, topic: arrival.topic, payload: arrival.payload });
  return { kind: "held", place, event, expected: last + 1, fresh };
}

async function following(tx: Tx, place: Place, sequence: number): Promise<{ follow?: Place }> {
  return (await advance(tx, place, sequence)) ? { follow: place } : {};
}

export async function keepLate(tx: Tx, { event, place, topic, payload }: Omit<OrderedArrival, "ordered">, last: number): Promise<DeadLetter> {
  const error = `late: sequence ${event.sequence} came after its aggregate went on to ${last} (its gap was skipped after the gap timeout); not processed out of order`;
  const letter = { eventId: event.id, consumer: place.consumer, topic, payload, error, attempts: 0 };
  await recordDeadLetter(tx, letter);
  return letter;
}

type Write = (sql: Sql, letter: DeadLetter) => Promise<unknown>;

// Retried until written (or closing): never acknowledged unwritten.
export async function keepDeadLetter(processing: Processing, letter: DeadLetter, write: Write = recordDeadLetter): Promise<void> {
  await retryWithBackoff(
    () => write(processing.sql, letter),
    processing.closing,
    (error) => processing.onError?.(`event ${letter.eventId}: dead letter not written yet: ${describeDbError(error)}`),
  );
}

export async function keepHandlerLetter(
  processing: Processing, message: Pick<DeadLetter, "eventId" | "topic" | "payload">, error: unknown, write?: Write,
): Promise<DeadLetter> {
  const { eventId, topic, payload } = message;
  const letter = { eventId, consumer: processing.consumer, topic, payload, error: describeDbError(error), attempts: processing.maxHandlerAttempts };
  await keepDeadLetter(processing, letter, write);
  return letter;
}

// Held events go one at a time, each in its own transaction and handler budget. Told: what to tell
// once one's transaction committed; none: the aggregate waits.
type Told = (() => void) | undefined;

export class Releaser {
  constructor(
    private readonly processing: Processing,
    private readonly report: Report,
    private readonly timeoutMs: number,
  ) {}

  /** Tells what became of an event from the broker (or the API: `filled`), then releases those it lets follow. */
  async settled(outcome: Outcome, event: EventEnvelope, topic: string, redelivered: boolean, filled: boolean): Promise<void> {
    switch (outcome.kind) {
      case "processed":
      case "duplicate": {
        const duplicate = outcome.kind === "duplicate";
        this.report.delivered({ event, topic, duplicate, redelivered, held: false, gapSkipped: false, filled });
        if (outcome.follow) await this.release(outcome.follow);
        return;
      }
      case "held":
        if (outcome.fresh) this.report.held(outcome.place, outcome.event, topic, outcome.expected);
        return;
      case "late":
        this.report.late(outcome.place, outcome.event, outcome.last, outcome.letter);
    }
  }

  async release(place: Place): Promise<void> {
    for (let told = await this.next(place); told; told = await this.next(place)) told();
  }

  private async next(place: Place): Promise<Told> {
    let current: NextHeld | undefined;
    const what = (): string => `held event ${current?.eventId ?? `of ${place.aggregateType} ${place.aggregateId}`}`;
    try {
      return await withHandlerBudget(this.processing, what, () => transaction(this.processing.sql, (tx) => this.step(tx, place, (held) => (current = held))));
    } catch (error) {
      if (error instanceof Closing || current === undefined) throw error;
      this.report.deadLettered(await keepHandlerLetter(this.processing, current, error, deadLetterHeld));
      return undefined;
    }
  }

  private async step(tx: Tx, place: Place, taking: (held: NextHeld) => void): Promise<Told> {
    const last = (await lockPlace(tx, place))[0]!.last;
    const held = await nextHeld(tx, place, this.timeoutMs);
    if (!held) return undefined;
    const turn = turnOf(last, held.sequence);
    if (turn === "ahead" && !held.overdue) return undefined;
    taking(held);
    // Held only once parsed, so the payload parses again.
    const envelope = parseEnvelope(held.payload);
    if (!envelope) throw new Error(`bug: held event ${held.eventId} is not an envelope`);
    const event = { ...envelope, sequence: held.sequence };
    await deleteHeld(tx, held.eventId, place.consumer);
    if (turn === "past") {
      // A held copy of an event already processed is only deleted.
      if (await inboxHas(tx, event.id, place.consumer)) return () => {};
      const letter = await keepLate(tx, { event, place, topic: held.topic, payload: held.payload }, last);
      return () => this.report.late(place, event, last, letter);
    }
    const fresh = await recordInbox(tx, event.id, place.consumer);
    if (fresh) await this.processing.handler?.(event, tx);
    await advance(tx, place, held.sequence);
    const gapSkipped = turn === "ahead";
    return () => {
      if (gapSkipped) this.report.gapSkipped(place, event, last + 1, held.waitedMs);
      this.report.delivered({ event, topic: held.topic, duplicate: !fresh, redelivered: false, held: true, gapSkipped, filled: false });
    };
  }
}

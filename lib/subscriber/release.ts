// The events held for one aggregate, processed from subscriber_held_events in sequence order:
// after an event in its turn finds held events behind it (receive.ts), and from the gap sweep
// (gap-sweep.ts), for a turn a crash left unreleased or a gap older than the gap timeout.
// Each held event in a transaction of its own, with a handler budget of its own: a held event
// whose handler keeps failing is kept as a dead letter alone (the event before it stays
// processed), and its aggregate's later events wait again, for an operator or the timeout.
import { parseEnvelope } from "../charges/events.ts";
import { describeDbError, type Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { keepDeadLetterWith } from "./dead-letter.ts";
import { recordDeadLetter, recordInbox, type DeadLetter } from "./inbox-sql.ts";
import { handlerAttempts, lateLetter, turnOf, withHandlerBudget, type Processing, type SequencedEvent } from "./process.ts";
import type { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import { advance, deadLetterHeld, deleteHeld, inboxHas, lockPlace, nextHeld, type NextHeld, type Place } from "./sequence-sql.ts";

type Step =
  /** Nothing held, or the next held event must wait for its turn. */
  | { readonly kind: "waiting" }
  | { readonly kind: "released"; readonly event: SequencedEvent; readonly topic: string; readonly duplicate: boolean; readonly skipped?: Skipped }
  /** A held copy of an event already processed, deleted. */
  | { readonly kind: "dropped" }
  | { readonly kind: "late"; readonly event: SequencedEvent; readonly last: number; readonly letter: DeadLetter };

interface Skipped {
  readonly expected: number;
  readonly waitedMs: number;
}

export class Releaser {
  constructor(
    private readonly processing: Processing,
    private readonly report: Report,
    private readonly timeoutMs: number,
  ) {}

  /** Processes the aggregate's held events that may go, in order, until one must wait. */
  async release(place: Place): Promise<void> {
    for (;;) {
      const step = await this.next(place);
      switch (step.kind) {
        case "waiting":
          return;
        case "dropped":
          continue;
        case "late":
          this.report.late(place, step.event, step.last, step.letter);
          continue;
        case "released": {
          const { event, topic, duplicate, skipped } = step;
          if (skipped) this.report.gapSkipped(place, event, skipped.expected, skipped.waitedMs);
          this.report.delivered({ event, topic, duplicate, redelivered: false, held: true, gapSkipped: skipped !== undefined, filled: false });
        }
      }
    }
  }

  /** One held event's transaction, retried; a handler out of budget leaves it a dead letter, and the aggregate waits. */
  private async next(place: Place): Promise<Step> {
    let current: NextHeld | undefined;
    const what = (): string => `held event ${current?.eventId ?? `of ${place.aggregateType} ${place.aggregateId}`}`;
    try {
      return await withHandlerBudget(this.processing, what, () => transaction(this.processing.sql, (tx) => this.step(tx, place, (held) => (current = held))));
    } catch (error) {
      if (error instanceof Closing || current === undefined) throw error;
      const letter: DeadLetter = {
        eventId: current.eventId,
        consumer: place.consumer,
        topic: current.topic,
        payload: current.payload,
        error: describeDbError(error),
        attempts: handlerAttempts(this.processing),
      };
      await keepDeadLetterWith(this.processing, letter, deadLetterHeld);
      this.report.deadLettered(letter);
      return { kind: "waiting" };
    }
  }

  private async step(tx: Tx, place: Place, taking: (held: NextHeld) => void): Promise<Step> {
    const last = await lockPlace(tx, place);
    const held = await nextHeld(tx, place, this.timeoutMs);
    if (!held) return { kind: "waiting" };
    const turn = turnOf(last, held.sequence);
    if (turn === "ahead" && !held.overdue) return { kind: "waiting" };
    taking(held);
    const event = heldEvent(held);
    await deleteHeld(tx, held.eventId, place.consumer);
    if (turn === "past") {
      if (await inboxHas(tx, event.id, place.consumer)) return { kind: "dropped" };
      const letter = lateLetter({ event, place, topic: held.topic, payload: held.payload }, last);
      await recordDeadLetter(tx, letter);
      return { kind: "late", event, last, letter };
    }
    const fresh = await recordInbox(tx, event.id, place.consumer);
    if (fresh) await this.processing.handler?.(event, tx);
    await advance(tx, place, held.sequence);
    const skipped = turn === "ahead" ? { expected: last + 1, waitedMs: held.waitedMs } : undefined;
    return { kind: "released", event, topic: held.topic, duplicate: !fresh, ...(skipped && { skipped }) };
  }
}

/** The held payload as the envelope it was when it came (it was held only once parsed). */
function heldEvent(held: NextHeld): SequencedEvent {
  const envelope = parseEnvelope(held.payload);
  if (!envelope) throw new Error(`bug: held event ${held.eventId} is not an envelope`);
  return { ...envelope, sequence: held.sequence };
}

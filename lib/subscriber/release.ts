// An aggregate's held events, processed in sequence order after an event in its turn or from the
// gap sweep. Each in its own transaction and handler budget: one whose handler keeps failing
// becomes a dead letter alone, and the aggregate's later events wait again for the timeout.
import { parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import type { Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { keepHandlerLetter, recordDeadLetter, type DeadLetter } from "./dead-letter.ts";
import { lateLetter, turnOf, withHandlerBudget, type Outcome, type Processing, type SequencedEvent } from "./process.ts";
import type { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import { advance, deadLetterHeld, deleteHeld, inboxHas, lockPlace, nextHeld, recordInbox, type NextHeld, type Place } from "./sequence-sql.ts";

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

  /** Tells what became of an event from the broker (or the API: `filled`), then releases those it lets follow. */
  async settled(outcome: Outcome, event: EventEnvelope, topic: string, redelivered: boolean, filled: boolean): Promise<void> {
    switch (outcome.kind) {
      case "processed":
      case "duplicate": {
        const duplicate = outcome.kind === "duplicate";
        if (filled && !duplicate) this.report.filled();
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
      this.report.deadLettered(await keepHandlerLetter(this.processing, current, error, deadLetterHeld));
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

/** Held only once parsed, so the payload parses again. */
function heldEvent(held: NextHeld): SequencedEvent {
  const envelope = parseEnvelope(held.payload);
  if (!envelope) throw new Error(`bug: held event ${held.eventId} is not an envelope`);
  return { ...envelope, sequence: held.sequence };
}

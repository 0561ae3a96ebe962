// An aggregate's held events in sequence order, each in its own transaction and handler budget:
// one whose handler keeps failing becomes a dead letter alone; the later ones wait for the timeout.
import { parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import type { Tx } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import { Closing, keepHandlerLetter, keepLate, turnOf, withHandlerBudget, type Outcome, type Processing, type SequencedEvent } from "./process.ts";
import type { Report } from "./report.ts";
import { advance, deadLetterHeld, deleteHeld, inboxHas, lockPlace, nextHeld, recordInbox } from "./sequence-sql.ts";
import type { NextHeld, Place } from "./sequence-sql.ts";

// What to tell once the held event's transaction committed; none: the aggregate waits.
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
    const last = await lockPlace(tx, place);
    const held = await nextHeld(tx, place, this.timeoutMs);
    if (!held) return undefined;
    const turn = turnOf(last, held.sequence);
    if (turn === "ahead" && !held.overdue) return undefined;
    taking(held);
    const event = heldEvent(held);
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

// Held only once parsed, so the payload parses again.
function heldEvent(held: NextHeld): SequencedEvent {
  const envelope = parseEnvelope(held.payload);
  if (!envelope) throw new Error(`bug: held event ${held.eventId} is not an envelope`);
  return { ...envelope, sequence: held.sequence };
}

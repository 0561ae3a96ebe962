// What the subscriber tells about each event it settled, in one place for the receiver and
// the release of held events: the counts and metrics, the caller's callbacks, the gap lines.
import { silentLogger, type Logger } from "../platform/log.ts";
import { SubscriberCounts } from "./counts.ts";
import type { DeadLetter } from "./inbox-sql.ts";
import type { SequencedEvent } from "./process.ts";
import type { Gap, Place } from "./sequence-sql.ts";
import type { Delivery, SubscriberOptions } from "./types.ts";

export class Report {
  readonly counts: SubscriberCounts;
  private readonly log: Logger;

  constructor(private readonly options: SubscriberOptions) {
    this.counts = new SubscriberCounts(options.consumer, options.meter);
    this.log = options.log ?? silentLogger;
  }

  delivered(delivery: Delivery): void {
    this.counts.countDelivery(delivery.duplicate);
    this.options.onDelivery?.(delivery);
  }

  rejected(topic: string, reason: string): void {
    this.counts.countRejection();
    this.options.onRejected?.(topic, reason);
  }

  /** Not a valid event; kept in subscriber_dead_letters with the reason. */
  malformed(letter: DeadLetter): void {
    this.counts.countMalformed();
    this.options.onError?.(`message on ${letter.topic} kept in subscriber_dead_letters: ${letter.error}`);
    this.options.onMalformed?.(letter);
  }

  deadLettered(letter: DeadLetter): void {
    this.counts.countDeadLetter();
    this.options.onError?.(`event ${letter.eventId}: handler failed ${letter.attempts} times, kept in subscriber_dead_letters: ${letter.error}`);
    this.options.onDeadLetter?.(letter);
  }

  /** Kept in subscriber_held_events: a gap before it. */
  held(place: Place, event: SequencedEvent, topic: string, expected: number): void {
    this.counts.countGap("held");
    this.log.warn("event ahead of its turn held", { ...fieldsOf(place, event), expectedSequence: expected, receivedSequence: event.sequence });
    this.options.onHeld?.({ event, topic, expected });
  }

  /** About to be processed past its missing predecessor(s). */
  gapSkipped(place: Place, event: SequencedEvent, expected: number, waitedMs: number): void {
    this.counts.countGap("released_after_timeout");
    this.log.warn("sequence gap skipped after the gap timeout", {
      ...fieldsOf(place, event),
      expectedSequence: expected,
      receivedSequence: event.sequence,
      waitedMs: Math.round(waitedMs),
    });
  }

  /** The API answered the gap's next event, and the events it had that were not held were processed (`filled` of them new). */
  gapFilled(gap: Gap, filled: number): void {
    this.log.info("sequence gap filled from the API", { ...gapFields(gap), filled });
  }

  /** The API answered, without the gap's next event: the gap waits for the broker or the timeout. */
  notFilled(gap: Gap, reason: string): void {
    this.log.warn("sequence gap not filled from the API", { ...gapFields(gap), reason });
  }

  /** The API did not answer the gap (down, refused the token): asked again later. */
  fillFailed(gap: Gap, error: string): void {
    this.log.warn("sequence gap not filled from the API", { ...gapFields(gap), error });
    this.options.onError?.(`gap of ${gap.place.aggregateType} ${gap.place.aggregateId} after ${gap.last} not filled from the API (asked again later): ${error}`);
  }

  /** Came after its aggregate went past it; kept in subscriber_dead_letters. */
  late(place: Place, event: SequencedEvent, last: number, letter: DeadLetter): void {
    this.counts.countGap("late");
    this.counts.countDeadLetter();
    this.log.warn("event after its skipped turn kept in subscriber_dead_letters", {
      ...fieldsOf(place, event),
      lastSequence: last,
      receivedSequence: event.sequence,
    });
    this.options.onDeadLetter?.(letter);
  }
}

function fieldsOf(place: Place, event: SequencedEvent): Record<string, string> {
  return { consumer: place.consumer, aggregateType: place.aggregateType, aggregateId: place.aggregateId, eventId: event.id };
}

function gapFields(gap: Gap): Record<string, string | number> {
  const { consumer, aggregateType, aggregateId } = gap.place;
  return { consumer, aggregateType, aggregateId, lastSequence: gap.last, heldSequence: gap.held[0] ?? 0 };
}

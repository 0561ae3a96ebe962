// What the subscriber tells about each event it settled: its counts, the metrics (labelled by
// consumer and outcome only), the caller's callbacks and the gap lines.
import { metrics, type Counter, type ObservableGauge, type ObservableResult } from "@opentelemetry/api";
import { silentLogger, type Logger } from "../platform/log.ts";
import type { DeadLetter, Gap, Place } from "./sequence-sql.ts";
import { COUNT_NAMES, type Counts, type Delivery, type SequencedEvent, type SubscriberOptions } from "./types.ts";

export function withCounts<T extends object, K extends string>(
  target: T,
  names: readonly K[],
  read: (name: K) => number,
): T & Readonly<Record<K, number>> {
  for (const name of names) Object.defineProperty(target, name, { get: () => read(name), enumerable: true });
  return target as T & Readonly<Record<K, number>>;
}

export class Report {
  readonly counts = Object.fromEntries(COUNT_NAMES.map((name) => [name, 0])) as Counts;
  private readonly log: Logger;
  private readonly consumer: string;
  private readonly events: Counter;
  private readonly deadLetters: Counter;
  private readonly gaps: Counter;
  private readonly heldGauge: ObservableGauge;
  // The consumer's held events as the gap sweep last counted them; unknown before its first run.
  heldNow: number | undefined;
  private readonly observeHeld = (result: ObservableResult): void => {
    if (this.heldNow !== undefined) result.observe(this.heldNow, { consumer: this.consumer });
  };

  constructor(private readonly options: SubscriberOptions) {
    const { consumer, meter = metrics.getMeter("charges") } = options;
    this.consumer = consumer;
    this.log = options.log ?? silentLogger;
    this.deadLetters = meter.createCounter("subscriber_dead_letters_total", {
      description: "Events the reference subscriber kept in subscriber_dead_letters instead of processing: the handler failed its retry budget, or the event came after its turn was skipped",
    });
    this.events = meter.createCounter("subscriber_events_total", {
      description: "Events the reference subscriber settled, by outcome: processed (new; a held event when it is processed), duplicate (already in the inbox), rejected (not an event), malformed (not a valid event, kept in subscriber_dead_letters)",
    });
    this.gaps = meter.createCounter("subscriber_sequence_gaps_total", {
      description: "Events that met a gap in their aggregate's sequence, by outcome: held (came ahead of their turn), filled (never came from the broker, read from the API's GET /charges/:id/events to fill a gap), released_after_timeout (processed past a missing predecessor after SUBSCRIBER_GAP_TIMEOUT_MS), late (came after their turn was skipped; kept in subscriber_dead_letters)",
    });
    this.heldGauge = meter.createObservableGauge("subscriber_held_events", {
      description: "Events the consumer holds now in subscriber_held_events until their turn (its whole share group: take the max over members)",
    });
    this.heldGauge.addCallback(this.observeHeld);
    // At zero from the start: a rate() alert on dead letters works before the first one.
    this.deadLetters.add(0, { consumer });
    for (const outcome of ["processed", "duplicate", "rejected", "malformed"]) this.events.add(0, { consumer, outcome });
    for (const outcome of ["held", "filled", "released_after_timeout", "late"]) this.gaps.add(0, { consumer, outcome });
  }

  delivered(delivery: Delivery): void {
    if (delivery.filled && !delivery.duplicate) {
      this.counts.gapsFilled += 1;
      this.gap("filled");
    }
    this.counts.processed += 1;
    if (delivery.duplicate) this.counts.duplicates += 1;
    this.events.add(1, { consumer: this.consumer, outcome: delivery.duplicate ? "duplicate" : "processed" });
    this.options.onDelivery?.(delivery);
  }

  rejected(topic: string, reason: string): void {
    this.counts.rejected += 1;
    this.events.add(1, { consumer: this.consumer, outcome: "rejected" });
    this.options.onRejected?.(topic, reason);
  }

  malformed(letter: DeadLetter): void {
    this.counts.malformed += 1;
    this.events.add(1, { consumer: this.consumer, outcome: "malformed" });
    this.deadLetters.add(1, { consumer: this.consumer });
    this.options.onError?.(`message on ${letter.topic} kept in subscriber_dead_letters: ${letter.error}`);
    this.options.onMalformed?.(letter);
  }

  deadLettered(letter: DeadLetter): void {
    this.countDeadLetter();
    this.options.onError?.(`event ${letter.eventId}: handler failed ${letter.attempts} times, kept in subscriber_dead_letters: ${letter.error}`);
    this.options.onDeadLetter?.(letter);
  }

  held(place: Place, event: SequencedEvent, topic: string, expected: number): void {
    this.counts.held += 1;
    this.gap("held");
    this.log.warn("event ahead of its turn held", { ...place, eventId: event.id, expectedSequence: expected, receivedSequence: event.sequence });
    this.options.onHeld?.({ event, topic, expected });
  }

  gapSkipped(place: Place, event: SequencedEvent, expected: number, waitedMs: number): void {
    this.counts.gapsSkipped += 1;
    this.gap("released_after_timeout");
    const fields = { ...place, eventId: event.id, expectedSequence: expected, receivedSequence: event.sequence, waitedMs: Math.round(waitedMs) };
    this.log.warn("sequence gap skipped after the gap timeout", fields);
  }

  /** `filled`: how many of the events the API answered were new. */
  gapFilled(gap: Gap, filled: number): void {
    this.log.info("sequence gap filled from the API", { ...gapFields(gap), filled });
  }

  notFilled(gap: Gap, reason: string): void {
    this.log.warn("sequence gap not filled from the API", { ...gapFields(gap), reason });
  }

  fillFailed(gap: Gap, error: string): void {
    this.log.warn("sequence gap not filled from the API", { ...gapFields(gap), error });
    this.options.onError?.(`gap of ${gap.place.aggregateType} ${gap.place.aggregateId} after ${gap.last} not filled from the API (asked again later): ${error}`);
  }

  late(place: Place, event: SequencedEvent, last: number, letter: DeadLetter): void {
    this.gap("late");
    this.countDeadLetter();
    this.log.warn("event after its skipped turn kept in subscriber_dead_letters", { ...place, eventId: event.id, lastSequence: last, receivedSequence: event.sequence });
    this.options.onDeadLetter?.(letter);
  }

  close(): void {
    this.heldGauge.removeCallback(this.observeHeld);
  }

  private countDeadLetter(): void {
    this.counts.deadLettered += 1;
    this.deadLetters.add(1, { consumer: this.consumer });
  }

  private gap(outcome: "held" | "filled" | "released_after_timeout" | "late"): void {
    this.gaps.add(1, { consumer: this.consumer, outcome });
  }
}

// A place is exactly its three keys (built so, or read so): they lead the log line in this order.
function gapFields(gap: Gap): Record<string, string | number> {
  return { ...gap.place, lastSequence: gap.last, heldSequence: gap.held[0] ?? 0 };
}

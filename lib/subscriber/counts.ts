// What the subscriber has done so far, for its Subscriber view; the same is counted on the
// meter, where an operator graphs throughput (subscriber_events_total), alerts on dead
// letters (subscriber_dead_letters_total) and watches order (subscriber_sequence_gaps_total,
// subscriber_held_events). Labels: the consumer and the outcome only.
import { metrics, type Counter, type Meter, type ObservableGauge, type ObservableResult } from "@opentelemetry/api";

/** What became of an event that met a gap in its aggregate's sequence. */
export type GapOutcome = "held" | "filled" | "released_after_timeout" | "late";
const GAP_OUTCOMES: readonly GapOutcome[] = ["held", "filled", "released_after_timeout", "late"];

export class SubscriberCounts {
  processed = 0;
  duplicates = 0;
  rejected = 0;
  deadLettered = 0;
  held = 0;
  gapsSkipped = 0;
  gapsFilled = 0;
  malformed = 0;
  private readonly deadLetters: Counter;
  private readonly events: Counter;
  private readonly gaps: Counter;
  private readonly heldGauge: ObservableGauge;
  // The consumer's held events as the gap sweep last counted them; unknown before its first run.
  private heldNow: number | undefined;
  private readonly observeHeld = (result: ObservableResult): void => {
    if (this.heldNow !== undefined) result.observe(this.heldNow, { consumer: this.consumer });
  };

  constructor(
    private readonly consumer: string,
    meter: Meter = metrics.getMeter("charges"),
  ) {
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
    // At zero from the start, as the relay's counters are: a rate() or increase() alert on
    // dead letters works before the first one, and a dashboard shows 0 rather than no data.
    this.deadLetters.add(0, { consumer });
    for (const outcome of ["processed", "duplicate", "rejected", "malformed"]) this.events.add(0, { consumer, outcome });
    for (const outcome of GAP_OUTCOMES) this.gaps.add(0, { consumer, outcome });
  }

  countDelivery(duplicate: boolean): void {
    this.processed += 1;
    if (duplicate) this.duplicates += 1;
    this.events.add(1, { consumer: this.consumer, outcome: duplicate ? "duplicate" : "processed" });
  }

  countRejection(): void {
    this.rejected += 1;
    this.events.add(1, { consumer: this.consumer, outcome: "rejected" });
  }

  /** A message that is not a valid event, kept in subscriber_dead_letters. */
  countMalformed(): void {
    this.malformed += 1;
    this.events.add(1, { consumer: this.consumer, outcome: "malformed" });
    this.deadLetters.add(1, { consumer: this.consumer });
  }

  countDeadLetter(): void {
    this.deadLettered += 1;
    this.deadLetters.add(1, { consumer: this.consumer });
  }

  countGap(outcome: GapOutcome): void {
    if (outcome === "held") this.held += 1;
    if (outcome === "released_after_timeout") this.gapsSkipped += 1;
    if (outcome === "filled") this.gapsFilled += 1;
    this.gaps.add(1, { consumer: this.consumer, outcome });
  }

  setHeldNow(count: number): void {
    this.heldNow = count;
  }

  /** Stops reporting the gauge: a closed subscriber no longer knows. */
  close(): void {
    this.heldGauge.removeCallback(this.observeHeld);
  }
}

// What the subscriber has done so far, for its Subscriber view; the same is counted on the
// meter, where an operator graphs throughput (subscriber_events_total) and alerts on dead
// letters (subscriber_dead_letters_total). Labels: the consumer and the outcome only.
import { metrics, type Counter, type Meter } from "@opentelemetry/api";

export class SubscriberCounts {
  processed = 0;
  duplicates = 0;
  rejected = 0;
  deadLettered = 0;
  private readonly deadLetters: Counter;
  private readonly events: Counter;

  constructor(
    private readonly consumer: string,
    meter: Meter = metrics.getMeter("charges"),
  ) {
    this.deadLetters = meter.createCounter("subscriber_dead_letters_total", {
      description: "Events the reference subscriber gave up on after its retry budget, kept in subscriber_dead_letters",
    });
    this.events = meter.createCounter("subscriber_events_total", {
      description: "Messages the reference subscriber acknowledged, by outcome: processed (new), duplicate (already in the inbox), rejected (not an event)",
    });
    // At zero from the start, as the relay's counters are: a rate() or increase() alert on
    // dead letters works before the first one, and a dashboard shows 0 rather than no data.
    this.deadLetters.add(0, { consumer });
    for (const outcome of ["processed", "duplicate", "rejected"]) this.events.add(0, { consumer, outcome });
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

  countDeadLetter(): void {
    this.deadLettered += 1;
    this.deadLetters.add(1, { consumer: this.consumer });
  }
}

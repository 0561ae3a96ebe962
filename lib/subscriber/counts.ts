// What the subscriber has done so far, for its Subscriber view; dead letters are also counted
// on the meter (subscriber_dead_letters_total), where an operator can alert on them.
import { metrics, type Counter, type Meter } from "@opentelemetry/api";

export class SubscriberCounts {
  processed = 0;
  duplicates = 0;
  rejected = 0;
  deadLettered = 0;
  private readonly deadLetters: Counter;

  constructor(
    private readonly consumer: string,
    meter: Meter = metrics.getMeter("charges"),
  ) {
    this.deadLetters = meter.createCounter("subscriber_dead_letters_total", {
      description: "Events the reference subscriber gave up on after its retry budget, kept in subscriber_dead_letters",
    });
  }

  countDelivery(duplicate: boolean): void {
    this.processed += 1;
    if (duplicate) this.duplicates += 1;
  }

  countRejection(): void {
    this.rejected += 1;
  }

  countDeadLetter(): void {
    this.deadLettered += 1;
    this.deadLetters.add(1, { consumer: this.consumer });
  }
}

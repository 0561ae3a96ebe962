// One received PUBLISH, from arrival to PUBACK. Not an event: acknowledged and counted as
// rejected. An event: through the inbox (process.ts), then acknowledged. A handler that keeps
// failing: the event is kept as a dead letter (dead-letter.ts), then acknowledged.
// The PUBACK goes out only after the transaction committed, so a crash before the commit gets
// the event redelivered, and one after it is deduplicated.
import type { IPublishPacket } from "mqtt";
import { parseEnvelope, type EventEnvelope } from "../events.ts";
import type { DeadLetter } from "./inbox-sql.ts";
import { SubscriberCounts } from "./counts.ts";
import { deadLetterOf, keepDeadLetter } from "./dead-letter.ts";
import { processEvent, type Processing } from "./process.ts";
import { Closing } from "./retry.ts";
import type { SubscriberOptions } from "./types.ts";

type Ack = () => void;

export class Receiver {
  readonly counts: SubscriberCounts;
  private readonly processing: Processing;
  private closing = false;
  // The event in hand, which drain() lets finish.
  private current: Promise<void> = Promise.resolve();

  constructor(private readonly options: SubscriberOptions) {
    this.counts = new SubscriberCounts(options.consumer, options.meter);
    const { sql, consumer, handler, onError } = options;
    this.processing = { sql, consumer, handler, onError, closing: () => this.closing };
  }

  // Called for one received PUBLISH at a time (see session.ts), so events are processed in
  // arrival order; `ack` sends its PUBACK.
  receive(packet: IPublishPacket, ack: Ack): void {
    if (packet.qos === 0) return ack(); // nothing to acknowledge; the relay never sends QoS 0
    const event = parseEnvelope(packet.payload);
    if (!event) return this.reject(packet.topic, "not an outbox event envelope", ack);
    this.current = processEvent(this.processing, event)
      .then(
        (duplicate) => this.delivered(packet, event, duplicate, ack),
        (error: unknown) => this.failed(packet, event, error, ack),
      )
      .catch((error: unknown) => {
        if (!(error instanceof Closing)) this.options.onError?.(`onDelivery or onDeadLetter threw: ${String(error)}`);
      });
  }

  /** Lets the event in hand commit and be acknowledged (a retry in progress gives up). */
  async drain(): Promise<void> {
    this.closing = true;
    await this.current;
  }

  private delivered(packet: IPublishPacket, event: EventEnvelope, duplicate: boolean, ack: Ack): void {
    this.counts.countDelivery(duplicate);
    try {
      this.options.onDelivery?.({ event, topic: packet.topic, duplicate, redelivered: packet.dup === true });
    } finally {
      ack();
    }
  }

  private async failed(packet: IPublishPacket, event: EventEnvelope, error: unknown, ack: Ack): Promise<void> {
    // Closing: no PUBACK, the broker redelivers it to the next session.
    if (error instanceof Closing) return;
    await this.giveUp(deadLetterOf(this.options.consumer, packet, event, error), ack);
  }

  private async giveUp(letter: DeadLetter, ack: Ack): Promise<void> {
    await keepDeadLetter(this.processing, letter);
    this.counts.countDeadLetter();
    this.options.onError?.(`event ${letter.eventId}: handler failed ${letter.attempts} times, kept in subscriber_dead_letters: ${letter.error}`);
    try {
      this.options.onDeadLetter?.(letter);
    } finally {
      ack();
    }
  }

  // Acknowledged (the broker drops it) without processing: it would fail the same way again.
  private reject(topic: string, reason: string, ack: Ack): void {
    this.counts.countRejection();
    this.options.onRejected?.(topic, reason);
    ack();
  }
}

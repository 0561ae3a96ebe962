// One received PUBLISH, from arrival to PUBACK. Not an event: acknowledged and counted as
// rejected, or, read by a caller's `check` (the library's typed events), kept as a dead letter
// with the reason first. An event: through the inbox in its aggregate's turn (process.ts), then
// acknowledged; when it was the turn held events waited for, they are processed before its
// PUBACK (release.ts). A handler that keeps failing: the event is kept as a dead letter
// (dead-letter.ts), then acknowledged.
// The PUBACK goes out only after the transaction committed, so a crash before the commit gets
// the event redelivered, and one after it is deduplicated (or finds it held already).
import type { IPublishPacket } from "mqtt";
import { aggregateTypeOfTopic, parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import { DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } from "../platform/config.ts";
import { deadLetterOf, keepDeadLetter, malformedLetterOf, payloadText } from "./dead-letter.ts";
import { handlerAttempts, processEvent, type Arrival, type Outcome, type Processing } from "./process.ts";
import { Releaser } from "./release.ts";
import { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import type { Checked, SubscriberOptions } from "./types.ts";

type Ack = () => void;

export class Receiver {
  readonly report: Report;
  readonly releaser: Releaser;
  readonly processing: Processing;
  private closing = false;
  // The event in hand, which drain() lets finish.
  private current: Promise<void> = Promise.resolve();

  constructor(private readonly options: SubscriberOptions) {
    this.report = new Report(options);
    const { sql, consumer, handler, onError, maxHandlerAttempts } = options;
    this.processing = { sql, consumer, handler, onError, maxHandlerAttempts, closing: () => this.closing };
    this.releaser = new Releaser(this.processing, this.report, options.gapTimeoutMs ?? DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS);
  }

  // Called for one received PUBLISH at a time (see session.ts), so events are processed in
  // arrival order, each in its aggregate's turn; `ack` sends its PUBACK.
  receive(packet: IPublishPacket, ack: Ack): void {
    if (packet.qos === 0) return ack(); // nothing to acknowledge; the relay never sends QoS 0
    const checked = this.check(packet.payload);
    if (checked.kind === "malformed") return this.malformed(packet, checked, ack);
    const { event } = checked;
    const arrival = this.arrivalOf(packet, event);
    this.current = processEvent(this.processing, arrival)
      .then(
        (outcome) => this.settled(packet, event, outcome, ack),
        (error: unknown) => this.failed(packet, event, error, ack),
      )
      .catch((error: unknown) => {
        if (!(error instanceof Closing)) this.options.onError?.(`onDelivery, onHeld or onDeadLetter threw: ${String(error)}`);
      });
  }

  private check(payload: Uint8Array | string): Checked {
    if (this.options.check) return this.options.check(payload);
    const event = parseEnvelope(payload);
    return event ? { kind: "event", event } : { kind: "malformed", reason: "not an outbox event envelope" };
  }

  // Without a `check` of the caller's, rejected as always; with one, kept as a dead letter
  // first (a crash before the PUBACK gets it redelivered and kept again, in the same row).
  private malformed(packet: IPublishPacket, checked: Extract<Checked, { kind: "malformed" }>, ack: Ack): void {
    if (!this.options.check) return this.reject(packet.topic, checked.reason, ack);
    const letter = malformedLetterOf(this.options.consumer, packet, checked.reason, checked.eventId);
    this.current = keepDeadLetter(this.processing, letter)
      .then(() => {
        try {
          this.report.malformed(letter);
        } finally {
          ack();
        }
      })
      .catch((error: unknown) => {
        if (!(error instanceof Closing)) this.options.onError?.(`onMalformed threw: ${String(error)}`);
      });
  }

  /** Lets the event in hand commit and be acknowledged (a retry in progress gives up). */
  async drain(): Promise<void> {
    this.closing = true;
    await this.current;
  }

  // An event without a sequence (an older relay), or on a topic that names no aggregate type,
  // is processed as before sequences: in arrival order, with no turn to wait for.
  private arrivalOf(packet: IPublishPacket, event: EventEnvelope): Arrival {
    const aggregateType = aggregateTypeOfTopic(packet.topic);
    const { sequence } = event;
    if (sequence === undefined || aggregateType === undefined || this.options.ordered === false) return { ordered: false, event };
    const place = { consumer: this.options.consumer, aggregateType, aggregateId: event.aggregateId };
    return { ordered: true, event: { ...event, sequence }, place, topic: packet.topic, payload: payloadText(packet) };
  }

  private async settled(packet: IPublishPacket, event: EventEnvelope, outcome: Outcome, ack: Ack): Promise<void> {
    try {
      switch (outcome.kind) {
        case "processed":
        case "duplicate": {
          const duplicate = outcome.kind === "duplicate";
          this.report.delivered({ event, topic: packet.topic, duplicate, redelivered: packet.dup === true, held: false, gapSkipped: false, filled: false });
          if (outcome.follow) await this.releaser.release(outcome.follow);
          return;
        }
        case "held":
          if (outcome.fresh) this.report.held(outcome.place, outcome.event, packet.topic, outcome.expected);
          return;
        case "late":
          this.report.late(outcome.place, outcome.event, outcome.last, outcome.letter);
          return;
      }
    } finally {
      ack();
    }
  }

  private async failed(packet: IPublishPacket, event: EventEnvelope, error: unknown, ack: Ack): Promise<void> {
    // Closing: no PUBACK, the broker redelivers it to the next session.
    if (error instanceof Closing) return;
    const letter = deadLetterOf(this.options.consumer, packet, event, error, handlerAttempts(this.processing));
    await keepDeadLetter(this.processing, letter);
    try {
      this.report.deadLettered(letter);
    } finally {
      ack();
    }
  }

  // Acknowledged (the broker drops it) without processing: it would fail the same way again.
  private reject(topic: string, reason: string, ack: Ack): void {
    try {
      this.report.rejected(topic, reason);
    } finally {
      ack();
    }
  }
}

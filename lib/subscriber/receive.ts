// One received PUBLISH, from arrival to PUBACK: a non-event is rejected (or, read by a caller's
// `check`, kept as a dead letter); an event goes through the inbox in its turn (process.ts), then
// the held events it releases (release.ts), then its PUBACK. The PUBACK follows the commit, so a
// crash before it gets a redelivery, and one after it is deduplicated (or finds it held).
import type { IPublishPacket } from "mqtt";
import { aggregateTypeOfTopic, parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import { DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } from "../platform/config.ts";
import { deadLetterOf, keepDeadLetter, malformedLetterOf, payloadText } from "./dead-letter.ts";
import { handlerAttempts, processEvent, type Arrival, type Outcome, type Processing } from "./process.ts";
import { Releaser } from "./release.ts";
import { Report } from "./report.ts";
import { Closing } from "./retry.ts";
import type { Checked, SubscriberOptions } from "./types.ts";
import { endSpan } from "../platform/trace-context.ts";
import { consumerSpan, withSpan } from "./trace.ts";

type Ack = () => void;

export class Receiver {
  readonly report: Report;
  readonly releaser: Releaser;
  readonly processing: Processing;
  private closing = false;
  private current: Promise<void> = Promise.resolve();

  constructor(private readonly options: SubscriberOptions) {
    this.report = new Report(options);
    const { sql, consumer, handler, onError, maxHandlerAttempts } = options;
    this.processing = { sql, consumer, handler, onError, maxHandlerAttempts, closing: () => this.closing };
    this.releaser = new Releaser(this.processing, this.report, options.gapTimeoutMs ?? DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS);
  }

  // Called for one PUBLISH at a time (session.ts), so events go in arrival order, each in its
  // aggregate's turn.
  receive(packet: IPublishPacket, ack: Ack): void {
    if (packet.qos === 0) return ack(); // nothing to acknowledge; the relay never sends QoS 0
    const checked = this.check(packet.payload);
    if (checked.kind === "malformed") return this.malformed(packet, checked, ack);
    const { event } = checked;
    const arrival = this.arrivalOf(packet, event);
    const span = consumerSpan(packet, event.id, this.options.consumer);
    this.current = withSpan(span, () => processEvent(this.processing, arrival))
      .then(
        (outcome) => {
          endSpan(span);
          return this.settled(packet, event, outcome, ack);
        },
        (error: unknown) => {
          endSpan(span, error instanceof Closing ? "closing" : "handler_failed");
          return this.failed(packet, event, error, ack);
        },
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

  // With a caller's `check`, kept as a dead letter first (a redelivery after a crash before the
  // PUBACK is kept again, in the same row); without, rejected.
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

  async drain(): Promise<void> {
    this.closing = true;
    await this.current;
  }

  // An event without a sequence (from a relay that kept none), or on a topic naming no aggregate
  // type, is processed in arrival order, with no turn to wait for.
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

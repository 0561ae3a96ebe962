// One received PUBLISH: through the inbox in its turn, then the held events it releases, then its
// PUBACK, after the commit: a crash before it gets a redelivery, one after it a duplicate.
import { createHash } from "node:crypto";
import { context, SpanKind, trace, type Span } from "@opentelemetry/api";
import type { IPublishPacket } from "mqtt";
import { aggregateTypeOfTopic, parseEnvelope, type EventEnvelope } from "../charges/events.ts";
import { DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } from "../platform/config.ts";
import { contextOf, endSpan, tracer } from "../platform/trace-context.ts";
import { Closing, keepDeadLetter, keepHandlerLetter, MAX_HANDLER_ATTEMPTS, processEvent, Releaser } from "./process.ts";
import type { Arrival, Processing } from "./process.ts";
import { Report } from "./report.ts";
import type { SubscriberOptions } from "./types.ts";
import type { Checked } from "./typed-events.ts";

type Ack = () => void;

export class Receiver {
  readonly report: Report;
  readonly releaser: Releaser;
  readonly processing: Processing;
  private closing = false;
  private current: Promise<void> = Promise.resolve();

  constructor(private readonly options: SubscriberOptions) {
    this.report = new Report(options);
    const { sql, consumer, handler, onError, maxHandlerAttempts = MAX_HANDLER_ATTEMPTS } = options;
    this.processing = { sql, consumer, handler, onError, maxHandlerAttempts, closing: () => this.closing };
    this.releaser = new Releaser(this.processing, this.report, options.gapTimeoutMs ?? DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS);
  }

  // Called for one PUBLISH at a time (session.ts): events go in arrival order.
  receive(packet: IPublishPacket, ack: Ack): void {
    if (packet.qos === 0) return ack(); // nothing to acknowledge; the relay never sends QoS 0
    const checked = this.options.check?.(packet.payload) ?? envelopeOf(packet.payload);
    if (checked.kind === "malformed") return this.malformed(packet, checked, ack);
    const { event } = checked;
    const span = consumerSpan(packet, event.id, this.options.consumer);
    // With the span active, the handler's own spans (its database calls) are its children.
    const active = trace.setSpan(context.active(), span);
    this.current = context
      .with(active, () => processEvent(this.processing, this.arrivalOf(packet, event)))
      .then(
        async (outcome) => {
          endSpan(span);
          await this.releaser.settled(outcome, event, packet.topic, packet.dup === true, false).finally(ack);
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

  // Acknowledged unprocessed (it would fail the same way again); with a `check`, once a dead letter.
  private malformed(packet: IPublishPacket, checked: Extract<Checked, { kind: "malformed" }>, ack: Ack): void {
    if (!this.options.check) return tellThenAck(() => this.report.rejected(packet.topic, checked.reason), ack);
    // Under its own id when it names one, else one made from its topic and bytes: a redelivery of it
    // updates the same row rather than adding one.
    const payload = payloadText(packet);
    const eventId = checked.eventId ?? contentId(packet.topic, payload);
    const error = `malformed: ${checked.reason}`;
    const letter = { eventId, consumer: this.options.consumer, topic: packet.topic, payload, error, attempts: 0 };
    this.current = keepDeadLetter(this.processing, letter)
      .then(() => tellThenAck(() => this.report.malformed(letter), ack))
      .catch((error: unknown) => {
        if (!(error instanceof Closing)) this.options.onError?.(`onMalformed threw: ${String(error)}`);
      });
  }

  async drain(): Promise<void> {
    this.closing = true;
    await this.current;
  }

  // Without a sequence (from a relay that kept none) or an aggregate type in its topic: no turn to wait for.
  private arrivalOf(packet: IPublishPacket, event: EventEnvelope): Arrival {
    const aggregateType = aggregateTypeOfTopic(packet.topic);
    const { sequence } = event;
    if (sequence === undefined || aggregateType === undefined || this.options.ordered === false) return { ordered: false, event };
    const place = { consumer: this.options.consumer, aggregateType, aggregateId: event.aggregateId };
    return { ordered: true, event: { ...event, sequence }, place, topic: packet.topic, payload: payloadText(packet) };
  }

  private async failed(packet: IPublishPacket, event: EventEnvelope, error: unknown, ack: Ack): Promise<void> {
    // Closing: no PUBACK, the broker redelivers it to the next session.
    if (error instanceof Closing) return;
    const letter = await keepHandlerLetter(this.processing, { eventId: event.id, topic: packet.topic, payload: payloadText(packet) }, error);
    tellThenAck(() => this.report.deadLettered(letter), ack);
  }
}

function envelopeOf(payload: Uint8Array | string): Checked {
  const event = parseEnvelope(payload);
  return event ? { kind: "event", event } : { kind: "malformed", reason: "not an outbox event envelope" };
}

// Acknowledged even when a callback throws: it was kept or settled.
function tellThenAck(tell: () => void, ack: Ack): void {
  try {
    tell();
  } finally {
    ack();
  }
}

// The child of the request that wrote the event (an MQTT 5 traceparent): a charge is one trace.
function consumerSpan(packet: IPublishPacket, eventId: string, consumer: string): Span {
  const traceparent = packet.properties?.userProperties?.traceparent;
  const attributes = {
    "messaging.system": "mqtt",
    "messaging.operation.type": "process",
    "messaging.destination.name": packet.topic,
    "messaging.message.id": eventId,
    "messaging.consumer.group.name": consumer,
  };
  const parent = contextOf(typeof traceparent === "string" ? traceparent : null);
  return tracer().startSpan(`process ${packet.topic}`, { kind: SpanKind.CONSUMER, attributes }, parent);
}

// A UUID-shaped digest (the dead letters' key is a uuid); never a real event's id in practice.
function contentId(topic: string, payload: string): string {
  const hex = createHash("sha256").update(topic).update("\u0000").update(payload).digest("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

// NUL, which a text column refuses, as U+FFFD.
function payloadText(packet: IPublishPacket): string {
  const text = typeof packet.payload === "string" ? packet.payload : Buffer.from(packet.payload).toString("utf8");
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
}

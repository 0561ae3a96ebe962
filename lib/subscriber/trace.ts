// An event's processing as an OpenTelemetry consumer span, the child of the request that wrote
// it (the traceparent the relay puts on an MQTT 5 publish), so one charge is one trace from its
// POST to this handler. On the OpenTelemetry API alone: with no tracer provider registered (ours,
// or the application's own SDK) the span records nothing.
import { context, SpanKind, trace, type Span } from "@opentelemetry/api";
import type { IPublishPacket } from "mqtt";
import { contextOf, tracer } from "../platform/trace-context.ts";

export function consumerSpan(packet: IPublishPacket, eventId: string, consumer: string): Span {
  const traceparent = packet.properties?.userProperties?.traceparent;
  return tracer().startSpan(
    `process ${packet.topic}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "mqtt",
        "messaging.operation.type": "process",
        "messaging.destination.name": packet.topic,
        "messaging.message.id": eventId,
        "messaging.consumer.group.name": consumer,
      },
    },
    contextOf(typeof traceparent === "string" ? traceparent : null),
  );
}

/** `run` with `span` active, so the handler's own spans (its database calls) are its children. */
export function withSpan<T>(span: Span, run: () => Promise<T>): Promise<T> {
  return context.with(trace.setSpan(context.active(), span), run);
}

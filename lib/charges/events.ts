// The event contract between the relay and every subscriber: the event types, their topics, the
// JSON envelope and the MQTT 5 properties beside it.
import { Type as t, type Static, type TObject, type TProperties } from "@sinclair/typebox";
import { isUuid } from "../platform/uuid.ts";

export const CHARGE = "charge";

// Patterns, not `format`: TypeBox checks a format only once a process-wide registry knows it.
export const UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
// What the relay's claim writes (to_char with microseconds, UTC): lib/relay/outbox-sql.ts.
const CREATED_AT_PATTERN = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{6}Z$";
const uuid = (description: string) => t.String({ pattern: UUID_PATTERN, description });
// A Postgres integer column holds every amount.
const cents = (minimum: number, description: string) => t.Integer({ minimum, maximum: 2_147_483_647, description });
const data = <P extends TProperties>(type: string, properties: P) => t.Object(properties, { description: `${type} data` });

/** Every event type, declared once: the names, schemas and AsyncAPI document follow it, in its order. */
const EVENTS = {
  ChargeCreated: {
    data: data("ChargeCreated", {
      chargeId: uuid("The charge's id (also the envelope's aggregateId)"),
      amountCents: cents(1, "The charge's amount"),
      currency: t.Optional(t.String({ pattern: "^[a-z]{3}$", description: "ISO 4217, lower case; absent from events written before currencies existed" })),
      status: t.Optional(t.Literal("authorized", { description: "A manual charge: authorized, captured later (ChargeCaptured) or canceled (ChargeCanceled); absent when captured at once" })),
    }),
    description: "A charge committed; published from the outbox row written in the charge's own transaction.",
  },
  ChargeRefunded: {
    data: data("ChargeRefunded", {
      chargeId: uuid("The refunded charge's id (also the envelope's aggregateId)"),
      refundId: uuid("The refund's id"),
      amountCents: cents(1, "This refund's amount"),
      refundedCents: cents(1, "The charge's refunded total after this refund"),
    }),
    description: "A refund of a charge committed; its aggregate is the charge, its sequence the next after the charge's last event.",
  },
  ChargeFailed: {
    data: data("ChargeFailed", {
      chargeId: uuid("The declined charge's id (also the envelope's aggregateId)"),
      amountCents: cents(1, "The charge's amount"),
      currency: t.String({ pattern: "^[a-z]{3}$", description: "ISO 4217, lower case" }),
      declineCode: t.String({ minLength: 1, description: "The payment processor's decline code (generic_decline, insufficient_funds, …)" }),
    }),
    description: "The payment processor declined a charge (PAYMENT_PROCESSOR=stripe); sequence 1, the charge's only event.",
  },
  ChargeCaptured: {
    data: data("ChargeCaptured", {
      chargeId: uuid("The captured charge's id (also the envelope's aggregateId)"),
      capturedCents: cents(1, "What was captured of the authorized amount; the rest was released"),
    }),
    description: "A manual charge captured (POST /charges/:id/capture); its sequence the next after the charge's last event.",
  },
  ChargeCanceled: {
    data: data("ChargeCanceled", { chargeId: uuid("The canceled charge's id (also the envelope's aggregateId)") }),
    description: "A manual charge canceled, its authorization released (POST /charges/:id/cancel); its sequence the next after the charge's last event.",
  },
  ChargeAuthorizationIncreased: {
    data: data("ChargeAuthorizationIncreased", {
      chargeId: uuid("The charge's id (also the envelope's aggregateId)"),
      amountCents: cents(1, "The charge's new authorized total"),
      previousAmountCents: cents(1, "Its authorized amount before"),
    }),
    description: "An authorized charge's amount raised (POST /charges/:id/increment-authorization); its sequence the next after the charge's last event.",
  },
} as const satisfies Record<string, { readonly data: TObject; readonly description: string }>;

type Events = typeof EVENTS;
export type EventType = keyof Events;
export type EventData<E extends EventType> = Static<Events[E]["data"]>;

export const EVENT_TYPES = Object.keys(EVENTS) as readonly EventType[];
const byType = <T>(make: (type: EventType) => T): Readonly<Record<EventType, T>> => Object.fromEntries(EVENT_TYPES.map((type) => [type, make(type)])) as Record<EventType, T>;
export const EVENT_DATA_SCHEMAS = byType((type): TObject => EVENTS[type].data);
export const EVENT_DESCRIPTIONS = byType((type): string => EVENTS[type].description);

export const CHARGE_CREATED = "ChargeCreated" satisfies EventType;
export const CHARGE_REFUNDED = "ChargeRefunded" satisfies EventType;
export const CHARGE_FAILED = "ChargeFailed" satisfies EventType;

/** What a subscriber receives as the MQTT payload (UTF-8 JSON). */
export interface EventEnvelope {
  readonly id: string;
  readonly type: string;
  readonly aggregateId: string;
  /** The writing request's tenant ("default" without authentication); optional for events older than tenants. */
  readonly tenantId?: string;
  readonly createdAt: string;
  /** Its place among its aggregate's events (1, 2, 3, …), in commit order; optional for older events. */
  readonly sequence?: number;
  readonly data: unknown;
}

export const ENVELOPE_SCHEMAS = byType((type): TObject =>
  t.Object(
    {
      id: uuid("The event id (the outbox row's id, a UUIDv7). Delivery is at least once: deduplicate by it."),
      type: t.Literal(type, { description: "The event type; also the topic's last level" }),
      aggregateId: uuid("The id of the aggregate (the charge) the event belongs to"),
      tenantId: t.String({ minLength: 1, description: "The tenant whose request wrote the event" }),
      createdAt: t.String({ pattern: CREATED_AT_PATTERN, description: "The outbox row's created_at, ISO-8601 UTC with microseconds" }),
      sequence: t.Integer({ minimum: 1, description: "1, 2, 3, … per aggregate, in commit order; a subscriber's first receipts come in this order" }),
      data: EVENT_DATA_SCHEMAS[type],
    },
    { description: `The ${type} envelope (UTF-8 JSON); subscribers ignore fields they do not know` },
  ),
);

export const EVENT_CONTENT_TYPE = "application/json";

const AGGREGATE_TOPICS: Readonly<Record<string, string>> = { [CHARGE]: "charges" };

/** `<prefix><aggregate level>/<EventType>`; an aggregate type without a level is its own level. */
export function topicOf(prefix: string, eventType: string, aggregateType: string = CHARGE): string {
  return `${prefix}${AGGREGATE_TOPICS[aggregateType] ?? aggregateType}/${eventType}`;
}

/** A topic's aggregate type, read back through topicOf's table; undefined for a one-level topic. */
export function aggregateTypeOfTopic(topic: string): string | undefined {
  const level = topic.split("/").at(-2);
  if (level === undefined) return undefined;
  return Object.keys(AGGREGATE_TOPICS).find((type) => AGGREGATE_TOPICS[type] === level) ?? level;
}

export function subscriptionFilter(prefix: string): string {
  return `${prefix}charges/#`;
}

// Not one topic level: empty, or with a wildcard, a level separator or NUL. A share name is one
// (MQTT 5 §4.8.2), and so is an event type, or the broker refuses the topic or drops the connection.
const NOT_ONE_LEVEL = /^$|[#+/\u0000]/;

export const isShareGroup = (group: string): boolean => !NOT_ONE_LEVEL.test(group);

export const isPublishableType = (eventType: string): boolean => !NOT_ONE_LEVEL.test(eventType);

export function sharedSubscriptionFilter(group: string, prefix: string): string {
  if (!isShareGroup(group)) throw new Error(`bug: invalid share group ${JSON.stringify(group)}`);
  return `$share/${group}/${subscriptionFilter(prefix)}`;
}

export function chargeCreatedPayload(data: EventData<"ChargeCreated">): string {
  return JSON.stringify({ chargeId: data.chargeId, amountCents: data.amountCents, ...(data.currency !== undefined && { currency: data.currency }), ...(data.status !== undefined && { status: data.status }) });
}

export function chargeFailedPayload(data: EventData<"ChargeFailed">): string {
  return JSON.stringify({ chargeId: data.chargeId, amountCents: data.amountCents, currency: data.currency, declineCode: data.declineCode });
}

export function buildEnvelope(envelope: Required<EventEnvelope>): string {
  const { id, type, aggregateId, tenantId, createdAt, sequence, data } = envelope;
  return JSON.stringify({ id, type, aggregateId, tenantId, createdAt, sequence, data });
}

type EventProperties = Required<Pick<EventEnvelope, "id" | "type" | "tenantId" | "sequence">> & {
  readonly traceparent: string | null;
};

export function userPropertiesOf(event: EventProperties): Record<string, string> {
  return {
    "event-id": event.id,
    "event-type": event.type,
    "tenant-id": event.tenantId,
    "aggregate-sequence": String(event.sequence),
    ...(event.traceparent && { traceparent: event.traceparent }),
  };
}

export function parseEnvelope(payload: Uint8Array | string): EventEnvelope | undefined {
  let value: unknown;
  try {
    value = JSON.parse(typeof payload === "string" ? payload : new TextDecoder().decode(payload));
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  const { id, type, aggregateId, tenantId, createdAt, sequence } = v;
  if (typeof id !== "string" || !isUuid(id)) return undefined;
  if (typeof type !== "string" || typeof aggregateId !== "string" || typeof createdAt !== "string") return undefined;
  if (tenantId !== undefined && typeof tenantId !== "string") return undefined;
  if (sequence !== undefined && !(Number.isInteger(sequence) && (sequence as number) >= 1)) return undefined;
  if (!("data" in v)) return undefined;
  const tenant = tenantId === undefined ? {} : { tenantId };
  const ordered = sequence === undefined ? {} : { sequence: sequence as number };
  return { id, type, aggregateId, ...tenant, createdAt, ...ordered, data: v.data };
}

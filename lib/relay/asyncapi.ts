// The AsyncAPI 3 document of the MQTT events, from lib/charges/events.ts. Its schemas are TypeBox
// objects, so a test checks a real published message with the very objects served.
import { Type as t, type TObject } from "@sinclair/typebox";
import { ENVELOPE_SCHEMAS, EVENT_CONTENT_TYPE, EVENT_DESCRIPTIONS, EVENT_TYPES, topicOf, UUID_PATTERN, type EventType } from "../charges/events.ts";

// Bumped when the envelope changes.
const EVENT_CONTRACT_VERSION = "1.0.0";

// W3C Trace Context version 00, the only one the API carries into the outbox.
const TRACEPARENT_PATTERN = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$";
const MQTT_BINDING_VERSION = "0.2.0";

function userPropertiesSchema(type: EventType): TObject {
  return t.Object(
    {
      "event-id": t.String({ pattern: UUID_PATTERN, description: "The envelope's id" }),
      "event-type": t.Literal(type, { description: "The envelope's type" }),
      "tenant-id": t.String({ minLength: 1, description: "The envelope's tenantId" }),
      "aggregate-sequence": t.String({ pattern: "^[1-9][0-9]*$", description: "The envelope's sequence, in decimal" }),
      traceparent: t.Optional(t.String({ pattern: TRACEPARENT_PATTERN, description: "The W3C traceparent of the request that wrote the event, when it had one" })),
    },
    { description: "MQTT 5 user properties (absent on MQTT 3.1.1 connections)" },
  );
}

const INFO_DESCRIPTION = [
  "Events of the charges service, published by its outbox relay from the transactional outbox.",
  "Delivery is at least once (QoS 1, not retained): a relay stopped between the broker's PUBACK and its own bookkeeping publishes the event again, so subscribers deduplicate by the envelope's `id`.",
  "Per aggregate, the relay hands the broker the events in `sequence` order; redeliveries may repeat an earlier event later.",
  "On MQTT 5 each publish carries the content type and the user properties described as each message's headers.",
  "A charge's published events can be read back from the API, byte for byte these payloads, while its outbox keeps them: `GET /charges/{id}/events?after=<sequence>` (its /openapi.json); a subscriber fills there a gap the broker will never fill (a session lost with a broker that kept none).",
].join("\n\n");

function message(type: EventType) {
  return {
    name: type,
    title: type,
    summary: EVENT_DESCRIPTIONS[type],
    contentType: EVENT_CONTENT_TYPE,
    payload: ENVELOPE_SCHEMAS[type],
    headers: userPropertiesSchema(type),
    bindings: { mqtt: { contentType: EVENT_CONTENT_TYPE, bindingVersion: MQTT_BINDING_VERSION } },
  };
}

function channel(prefix: string, type: EventType) {
  return {
    address: topicOf(prefix, type),
    description: `Every ${type} event, one publish per outbox row`,
    messages: { [type]: { $ref: `#/components/messages/${type}` } },
  };
}

function operation(type: EventType) {
  return {
    action: "send",
    summary: `The relay publishes each ${type} outbox row once the transaction that wrote it committed`,
    channel: { $ref: `#/channels/${type}` },
    messages: [{ $ref: `#/channels/${type}/messages/${type}` }],
    bindings: { mqtt: { qos: 1 as const, retain: false, bindingVersion: MQTT_BINDING_VERSION } },
  };
}

export type AsyncApiDocument = ReturnType<typeof buildAsyncApiDocument>;

export function buildAsyncApiDocument(prefix: string) {
  const each = <T>(make: (type: EventType) => T): Record<string, T> => Object.fromEntries(EVENT_TYPES.map((type) => [type, make(type)]));
  return {
    asyncapi: "3.0.0",
    info: { title: "Charges events", version: EVENT_CONTRACT_VERSION, description: INFO_DESCRIPTION },
    defaultContentType: EVENT_CONTENT_TYPE,
    channels: each((type) => channel(prefix, type)),
    operations: Object.fromEntries(EVENT_TYPES.map((type) => [`publish${type}`, operation(type)])),
    components: { messages: each(message) },
  };
}

// By prefix, for a test holding several relays.
const cachedJson = new Map<string, string>();

export function asyncApiJson(prefix: string): string {
  let json = cachedJson.get(prefix);
  if (json === undefined) cachedJson.set(prefix, (json = JSON.stringify(buildAsyncApiDocument(prefix))));
  return json;
}

// GET /asyncapi.json on the real relay's operator port: a valid AsyncAPI 3 document per the
// reference parser, built from lib/charges/events.ts, and true to the wire: a real ChargeCreated and
// ChargeRefunded, published by the relay, arrive on their channels' addresses (under the
// relay's MQTT_TOPIC_PREFIX) and match the document's payload and header schemas.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { DiagnosticSeverity, Parser } from "@asyncapi/parser";
import { Value } from "@sinclair/typebox/value";
import type { TObject } from "@sinclair/typebox";
import { CHARGE_CREATED, CHARGE_REFUNDED, EVENT_CONTENT_TYPE, EVENT_TYPES, topicOf } from "../lib/charges/events.ts";
import { asyncApiJson, buildAsyncApiDocument, type AsyncApiDocument } from "../lib/relay/asyncapi.ts";
import { startTestApi } from "../testkit/api.ts";
import { collect, type Received } from "../testkit/mqtt.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { newCharge, postRefund, refundBody } from "../testkit/refunds.ts";
import { freshDatabase, services } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("asyncapi");
const { mqttUrl, mqtt5 } = await services();
const prefix = `asyncapi-${crypto.randomUUID().slice(0, 8)}/`;
const api = await startTestApi(db.url);
const relay = await startEntrypoint("relay", { env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" } });
afterAll(async () => {
  await relay.child.stop();
  await api.close();
  await db.drop();
});

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async function served(): Promise<{ text: string; document: AsyncApiDocument }> {
  const res = await fetch(`${relay.base}/asyncapi.json`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toStartWith("application/json");
  const text = await res.text();
  return { text, document: JSON.parse(text) as AsyncApiDocument };
}

/** The schema's errors for `value`, as "path: message" lines (empty when it matches). */
function errors(schema: TObject, value: unknown): string[] {
  return [...Value.Errors(schema, value)].map((e) => `${e.path || "(root)"}: ${e.message}`);
}

test("the served document is the one built from the event contract, valid AsyncAPI 3 without error diagnostics", async () => {
  const { text } = await served();
  expect(text).toBe(asyncApiJson(prefix));
  const { document, diagnostics } = await new Parser().parse(text);
  expect(diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error).map((d) => `${d.path.join(".")}: ${d.message}`)).toEqual([]);
  expect(document?.version()).toBe("3.0.0");
  expect(document!.channels().all().map((c) => c.address()).sort()).toEqual(EVENT_TYPES.map((type) => topicOf(prefix, type)).sort());
  for (const operation of document!.operations().all()) {
    expect(operation.action()).toBe("send");
    expect(operation.bindings().get("mqtt")?.value()).toEqual({ qos: 1, retain: false });
  }
  for (const message of document!.messages().all()) {
    expect(message.contentType()).toBe(EVENT_CONTENT_TYPE);
    expect(Object.keys(message.payload()?.properties() ?? {})).toContain("sequence");
  }
  expect(document!.info().description()).toContain("deduplicate by the envelope's `id`");
});

test("a published ChargeCreated and ChargeRefunded arrive on their channel's address and match its schemas", async () => {
  const collector = await collect(mqttUrl, prefix);
  try {
    const chargeId = await newCharge(api, 4900);
    const refund = await postRefund(api, chargeId, refundBody(900), { key: crypto.randomUUID(), headers: { traceparent: TRACEPARENT } });
    expect(refund.status).toBe(201);
    const messages = await collector.waitFor(2);
    const { document } = await served();
    expect(messages.map((m) => m.envelope?.type)).toEqual([CHARGE_CREATED, CHARGE_REFUNDED]);
    for (const received of messages) checkAgainst(document, received);
    expect(messages[1]!.body.data).toMatchObject({ chargeId, amountCents: 900, refundedCents: 900 });
  } finally {
    await collector.close();
  }
});

/** The message's channel is found by its topic; its payload and properties match that channel's message. */
function checkAgainst(document: AsyncApiDocument, received: Received): void {
  const built = buildAsyncApiDocument(prefix);
  const [channelId, channel] = Object.entries(document.channels).find(([, c]) => c.address === received.topic) ?? [];
  expect(channelId).toBe(String(received.body.type));
  const [ref] = Object.values(channel!.messages);
  const name = ref!.$ref.replace("#/components/messages/", "");
  const message = document.components.messages[name]!;
  const schemas = built.components.messages[name]!;
  // The served JSON is the TypeBox objects serialized, so checking with them checks the document.
  expect(message.payload).toEqual(JSON.parse(JSON.stringify(schemas.payload)));
  expect(message.headers).toEqual(JSON.parse(JSON.stringify(schemas.headers)));
  expect(errors(schemas.payload, received.body)).toEqual([]);
  expect(Object.keys(received.body).sort()).toEqual(Object.keys(schemas.payload.properties).sort());
  const data = schemas.payload.properties.data as TObject;
  // Every member the data carries is in its schema, and every required one is there (an optional one, a manual charge's status, may be absent).
  const members = Object.keys(received.body.data as object);
  expect(members.every((m) => m in data.properties)).toBe(true);
  expect((data.required ?? []).every((m: string) => members.includes(m))).toBe(true);

  const operation = Object.values(document.operations).find((o) => o.channel.$ref === `#/channels/${channelId}`)!;
  expect(received.packet.qos).toBe(operation.bindings.mqtt.qos);
  expect(received.packet.retain).toBe(operation.bindings.mqtt.retain);
  if (!mqtt5) return;
  const properties = received.packet.properties ?? {};
  expect(properties.contentType).toBe(message.contentType);
  expect(errors(schemas.headers, properties.userProperties)).toEqual([]);
  expect(Object.keys(properties.userProperties ?? {}).every((k) => k in schemas.headers.properties)).toBe(true);
  if (channelId === CHARGE_REFUNDED) expect(properties.userProperties?.traceparent).toBe(TRACEPARENT);
}

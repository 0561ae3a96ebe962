// One charge is one trace, received by a real OTLP/HTTP endpoint: the API's server span (the
// child of the caller's traceparent), its transactions and processor calls, the relay's publish after a relay
// was SIGKILLed and another started, and the subscriber's handling of the event. Keys appear
// only hashed.
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../testkit/otlp.ts";
import { startEntrypoint, type Service } from "../testkit/processes.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { chargeWith, keyState, processorEnv } from "../testkit/processor.ts";
import { freshDatabase, services, type TestDatabase } from "../testkit/services.ts";
import { spawnSubscriber } from "../testkit/subscriber.ts";
import type { Child } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(120_000);

const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;
// The SDK's batch export runs every 5 s; a loaded machine needs margin beyond it.
const EXPORT_WAIT_MS = 40_000;

const { mqttUrl } = await services();
let db: TestDatabase;
let sim: ProcessorSim;
let otlp: OtlpReceiver;
let api: Service;
let collector: Collector;
let env: Record<string, string>;
let subscriber: Child;
const prefix = `test/${crypto.randomUUID()}/`;

beforeAll(async () => {
  [db, sim, otlp] = await Promise.all([freshDatabase("traces"), startProcessorSim(), startOtlpReceiver()]);
  env = {
    DATABASE_URL: db.url,
    MQTT_URL: mqttUrl,
    MQTT_TOPIC_PREFIX: prefix,
    LOG_LEVEL: "warn",
    API_POOL_SIZE: "8",
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
    ...authEnv(),
    ...processorEnv(sim),
  };
  api = await startEntrypoint("api", { env });
  collector = await collect(mqttUrl, prefix);
  subscriber = (await spawnSubscriber({ databaseUrl: db.url, mqttUrl, prefix, consumer: "traces", env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint } })).child;
});
afterAll(async () => {
  await collector?.close();
  await subscriber?.stop();
  await api?.child.stop();
  await Promise.all([sim?.stop(), otlp?.stop()]);
  await db?.drop();
});

/** Every span of `traceId`, with a way up from each to its ancestors. */
function treeOf(traceId: string) {
  const spans = otlp.spans().filter((s) => s.traceId === traceId);
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const ancestors = (span: ReceivedSpan): string[] => {
    const chain: string[] = [];
    for (let p = byId.get(span.parentSpanId); p !== undefined; p = byId.get(p.parentSpanId)) chain.push(p.spanId);
    return chain;
  };
  return { spans, ancestors };
}

test("a charge through the processor is one trace from the caller's span to the subscriber's handler, across a relay killed and restarted", async () => {
  // The relay that should have published is gone (SIGKILL); another one takes the row over.
  const first = await startEntrypoint("relay", { env });
  first.child.kill("SIGKILL");
  await first.child.exited;

  const key = `trace-${crypto.randomUUID()}`;
  const callerTrace = crypto.randomUUID().replaceAll("-", "");
  const callerSpan = callerTrace.slice(0, 16);
  const answer = await fetch(`${api.base}/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key, traceparent: `00-${callerTrace}-${callerSpan}-01`, ...(await authHeaders()) },
    body: chargeWith(4200),
  });
  expect(answer.status).toBe(201);
  const chargeId = String((await keyState(db.sql, key))?.resume?.chargeId);

  const relay = await startEntrypoint("relay", { env });
  try {
    const message = await collector.waitForMessage((m) => m.envelope?.aggregateId === chargeId, 30_000, "the charge's event");
    const eventId = String(message.envelope?.id);
    await waitUntil(() => otlp.spans().some((s) => s.kind === PRODUCER && s.attributes["messaging.message.id"] === eventId), EXPORT_WAIT_MS, "the relay's producer span");
    await relay.child.stop();
    await waitUntil(() => otlp.spans().filter((s) => s.traceId === callerTrace && s.kind === CLIENT && s.service === "charges-api").length >= 2, EXPORT_WAIT_MS, "the processor calls' spans");
    await waitUntil(() => otlp.spans().some((s) => s.kind === CONSUMER && s.attributes["messaging.message.id"] === eventId), EXPORT_WAIT_MS, "the subscriber's consumer span");

    const { spans, ancestors } = treeOf(callerTrace);
    const server = spans.find((s) => s.kind === SERVER && s.service === "charges-api");
    expect(server?.name).toBe("POST /charges");
    expect(server?.parentSpanId).toBe(callerSpan);
    expect(server?.attributes["http.response.status_code"]).toBe(201);
    expect(server?.attributes["http.route"]).toBe("/charges");

    // The request's transactions: phase 1's claim and phase 3's finish, each under the request.
    const transactions = spans.filter((s) => s.kind === CLIENT && s.attributes["db.system.name"] === "postgresql");
    expect(transactions.map((s) => s.name).sort()).toEqual(expect.arrayContaining(["claim idempotency_keys", "finish idempotency_keys"]));
    for (const tx of transactions) expect(tx.parentSpanId).toBe(server!.spanId);

    const calls = spans.filter((s) => s.kind === CLIENT && s.attributes["http.request.method"] === "POST" && String(s.attributes["url.full"]).includes("/v1/payment_intents"));
    expect(calls.length).toBeGreaterThanOrEqual(2);
    for (const call of calls) {
      expect(ancestors(call)).toContain(server!.spanId);
      expect(String(call.attributes["charges.processor.idempotency_key_hash"])).toMatch(/^[0-9a-f]{16}$/);
    }

    const producer = spans.find((s) => s.kind === PRODUCER && s.attributes["messaging.message.id"] === eventId);
    expect(producer?.service).toBe("charges-relay");
    expect(producer?.parentSpanId).toBe(server!.spanId);
    expect(producer?.attributes["messaging.destination.name"]).toBe(`${prefix}charges/ChargeCreated`);

    const consumer = otlp.spans().find((s) => s.kind === CONSUMER && s.attributes["messaging.message.id"] === eventId);
    expect(consumer?.service).toBe("charges-subscriber");
    expect(consumer?.status).not.toBe(2);
    // MQTT 5 carries the traceparent as a user property; MQTT 3.1.1 (the embedded broker) has
    // none, and there the consumer span starts a trace of its own, as docs/operations.md says.
    if (message.packet.properties?.userProperties?.traceparent !== undefined) {
      expect(consumer?.traceId).toBe(callerTrace);
      expect(consumer?.parentSpanId).toBe(server!.spanId);
    } else {
      expect(consumer?.traceId).not.toBe(callerTrace);
    }
  } finally {
    await relay.child.stop();
  }
  // Neither the caller's key nor the processor's derived keys travel raw.
  const exported = otlp.bodies().join("\n");
  expect(exported).not.toContain(key);
  expect(exported).not.toContain(`${chargeId}:create`);
});

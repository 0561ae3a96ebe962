// (3) broker limit: a bare mqtt.js client publishing QoS 1 messages of the envelope's size
// with a bounded in-flight window; (4) relay drain: the real `bun relay.ts` draining pending
// rows inserted beforehand into a fresh database.
import mqtt from "mqtt";
import { buildEnvelope, CHARGE_CREATED, EVENT_CONTENT_TYPE, topicOf, userPropertiesOf } from "../lib/events.ts";
import { MAX_IN_FLIGHT } from "../lib/relay/publisher.ts";
import { insertPending } from "../testkit/outbox.ts";
import { benchServices, freshDatabase, startProcess, untilDrained } from "./support.ts";

// A drain of the quick or full run's backlog takes seconds; this only bounds a stuck relay.
const DRAIN_TIMEOUT_MS = 180_000;

/** An envelope as the relay builds it, with real-length ids and timestamp. */
export function sampleEnvelope(): string {
  const chargeId = crypto.randomUUID();
  return buildEnvelope({
    id: crypto.randomUUID(),
    type: CHARGE_CREATED,
    aggregateId: chargeId,
    tenantId: "bench-tenant",
    createdAt: new Date().toISOString(),
    data: { chargeId, amountCents: 4900 },
  });
}

export interface BrokerLimit {
  readonly acksPerSec: number;
  readonly messages: number;
  readonly window: number;
  readonly payloadBytes: number;
}

export async function brokerLimit(messages: number, window: number = MAX_IN_FLIGHT): Promise<BrokerLimit> {
  const { mqttUrl } = await benchServices();
  const client = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5, clean: true, reconnectPeriod: 0 });
  const payload = sampleEnvelope();
  const topic = topicOf(`bench/limit-${crypto.randomUUID().slice(0, 8)}/`, CHARGE_CREATED);
  let next = 0;
  const started = performance.now();
  try {
    await Promise.all(
      Array.from({ length: window }, async () => {
        while (next < messages) {
          next += 1;
          await client.publishAsync(topic, payload, {
            qos: 1,
            properties: {
              contentType: EVENT_CONTENT_TYPE,
              userProperties: userPropertiesOf({ id: crypto.randomUUID(), type: CHARGE_CREATED, tenantId: "bench-tenant", traceparent: null }),
            },
          });
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    return { acksPerSec: messages / seconds, messages, window, payloadBytes: Buffer.byteLength(payload) };
  } finally {
    await client.endAsync();
  }
}

export interface RelayDrain {
  readonly rowsPerSec: number;
  readonly rows: number;
  readonly wallSeconds: number;
  readonly markedSpanSeconds: number;
}

export async function relayDrain(rows: number): Promise<RelayDrain> {
  const db = await freshDatabase("drain");
  try {
    await insertPending(db.sql, rows);
    const started = performance.now();
    const relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: `bench/${db.name}/` }, "/healthz");
    try {
      await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    } finally {
      await relay.child.stop();
    }
    const wallSeconds = (performance.now() - started) / 1000;
    // Throughput between the first and the last mark: excludes the process start-up.
    const [span] = await db.sql<{ s: number }[]>`
      select extract(epoch from max(published_at) - min(published_at))::float8 as s from outbox`;
    const markedSpanSeconds = span?.s ?? wallSeconds;
    return { rowsPerSec: rows / Math.max(markedSpanSeconds, 0.001), rows, wallSeconds, markedSpanSeconds };
  } finally {
    await db.drop();
  }
}

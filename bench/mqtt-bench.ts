// (3) broker limit: a bare mqtt.js client publishing QoS 1 messages of the envelope's size
// with a bounded in-flight window; (4) relay drain: the real `bun relay.ts` draining pending
// rows inserted beforehand into a fresh database.
import mqtt from "mqtt";
import { MAX_IN_FLIGHT } from "../lib/relay/publisher.ts";
import { freshDatabase, MQTT_URL, startChild } from "./support.ts";

/** An envelope as lib/events.ts builds it, with real-length ids and timestamp. */
export function sampleEnvelope(): string {
  const chargeId = crypto.randomUUID();
  return JSON.stringify({
    id: crypto.randomUUID(),
    type: "ChargeCreated",
    aggregateId: chargeId,
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
  const client = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5, clean: true, reconnectPeriod: 0 });
  const payload = sampleEnvelope();
  const topic = `bench/limit-${crypto.randomUUID().slice(0, 8)}/charges/ChargeCreated`;
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
              contentType: "application/json",
              userProperties: { "event-id": crypto.randomUUID(), "event-type": "ChargeCreated" },
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
    await db.sql`insert into charges (id, amount_cents, created_at)
                 select gen_random_uuid(), 4900, clock_timestamp() from generate_series(1, ${rows})`;
    await db.sql`insert into outbox (id, aggregate_id, event_type, payload, created_at)
                 select gen_random_uuid(), id, 'ChargeCreated',
                        json_build_object('chargeId', id, 'amountCents', amount_cents)::text, created_at
                   from charges`;
    const started = performance.now();
    const relay = await startChild(
      "relay.ts",
      { DATABASE_URL: db.url, MQTT_URL, MQTT_TOPIC_PREFIX: `bench/${db.name}/` },
      "/healthz",
      "RELAY_PORT",
    );
    try {
      const deadline = Date.now() + 180_000;
      for (;;) {
        const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null`;
        if (row?.n === 0) break;
        if (Date.now() > deadline) throw new Error(`relay left ${row?.n} rows pending after 180 s`);
        await Bun.sleep(20);
      }
    } finally {
      await relay.stop();
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

// (3) broker limit: a bare mqtt.js client publishing QoS 1 messages of the envelope's size
// with a bounded in-flight window; (4) relay drain: the real `bun relay.ts` draining pending
// rows committed at once into a fresh database. Both warmed up first (WARMUP).
import mqtt from "mqtt";
import { buildEnvelope, CHARGE_CREATED, EVENT_CONTENT_TYPE, topicOf, userPropertiesOf } from "../lib/charges/events.ts";
import { MAX_IN_FLIGHT, PROTOCOL_RECEIVE_MAXIMUM } from "../lib/relay/publisher.ts";
import { insertChains, insertPending } from "../testkit/outbox.ts";
import { benchServices, drainRate, freshDatabase, startProcess, untilDrained } from "./support.ts";

// A drain of the quick or full run's backlog takes seconds; this only bounds a stuck relay.
const DRAIN_TIMEOUT_MS = 180_000;
// Both sides are measured warm, as a client or relay in service is: before the measured
// messages, the bare client publishes this many and the relay drains this many rows. A fresh
// process spends its first second or so compiling (JIT), which is most of a 50,000-row drain;
// the limit's client ran in the long-lived bench process and so was measured warm, the relay,
// a new process each time, cold.
export const WARMUP = 20_000;

/** An envelope as the relay builds it, with real-length ids and timestamp. */
export function sampleEnvelope(): string {
  const chargeId = crypto.randomUUID();
  return buildEnvelope({
    id: crypto.randomUUID(),
    type: CHARGE_CREATED,
    aggregateId: chargeId,
    tenantId: "bench-tenant",
    createdAt: new Date().toISOString(),
    sequence: 1,
    data: { chargeId, amountCents: 4900 },
  });
}

export interface BrokerLimit {
  readonly acksPerSec: number;
  readonly messages: number;
  readonly window: number;
  readonly payloadBytes: number;
}

/**
 * `window`: publishes unacknowledged at once; "receive-maximum" takes the broker's CONNACK
 * Receive Maximum (Mosquitto's max_inflight_messages, 20 by default), which MQTT 5 forbids a
 * client to exceed and the relay honours; a bare mqtt.js client does not enforce it.
 */
export async function brokerLimit(messages: number, window: number | "receive-maximum" = MAX_IN_FLIGHT): Promise<BrokerLimit> {
  const { client, inFlight } = await connectBare(window);
  return publishWindow(client, messages, inFlight);
}

/** A bare MQTT 5 client on the bench's broker, and the window it keeps (the Receive Maximum's when asked for it). */
async function connectBare(window: number | "receive-maximum"): Promise<{ client: mqtt.MqttClient; inFlight: number }> {
  const { mqttUrl } = await benchServices();
  const client = mqtt.connect(mqttUrl, { protocolVersion: 5, clean: true, reconnectPeriod: 0 });
  const connack = await new Promise<mqtt.IConnackPacket>((resolve, reject) => {
    client.once("connect", resolve);
    client.once("error", reject);
  });
  return { client, inFlight: window === "receive-maximum" ? (connack.properties?.receiveMaximum ?? PROTOCOL_RECEIVE_MAXIMUM) : window };
}

async function publishWindow(client: mqtt.MqttClient, messages: number, window: number): Promise<BrokerLimit> {
  const payload = sampleEnvelope();
  const topic = topicOf(`bench/limit-${crypto.randomUUID().slice(0, 8)}/`, CHARGE_CREATED);
  try {
    await publishAll(client, topic, payload, Math.min(WARMUP, messages), window);
    const started = performance.now();
    await publishAll(client, topic, payload, messages, window);
    const seconds = (performance.now() - started) / 1000;
    return { acksPerSec: messages / seconds, messages, window, payloadBytes: Buffer.byteLength(payload) };
  } finally {
    await client.endAsync();
  }
}

/** A bare client kept connected and warm, for drains alternated with it round by round (drain-pairs.ts). */
export interface BareClient {
  /** The window it keeps (the Receive Maximum's when asked for it). */
  readonly window: number;
  /** Publishes `messages` as brokerLimit does; their PUBACKs per second. */
  publish(messages: number): Promise<number>;
  close(): Promise<void>;
}

export async function openBareClient(window: number | "receive-maximum" = MAX_IN_FLIGHT): Promise<BareClient> {
  const { client, inFlight } = await connectBare(window);
  const payload = sampleEnvelope();
  const topic = topicOf(`bench/limit-${crypto.randomUUID().slice(0, 8)}/`, CHARGE_CREATED);
  await publishAll(client, topic, payload, WARMUP, inFlight);
  return {
    window: inFlight,
    async publish(messages) {
      const started = performance.now();
      await publishAll(client, topic, payload, messages, inFlight);
      return messages / ((performance.now() - started) / 1000);
    },
    close: () => client.endAsync(),
  };
}

/** `messages` QoS 1 publishes with the relay's properties, `window` of them unacknowledged at a time. */
async function publishAll(client: mqtt.MqttClient, topic: string, payload: string, messages: number, window: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: window }, async () => {
      while (next < messages) {
        next += 1;
        await client.publishAsync(topic, payload, {
          qos: 1,
          properties: {
            contentType: EVENT_CONTENT_TYPE,
            userProperties: userPropertiesOf({ id: crypto.randomUUID(), type: CHARGE_CREATED, tenantId: "bench-tenant", sequence: 1, traceparent: null }),
          },
        });
      }
    }),
  );
}

export interface RelayDrain {
  readonly rowsPerSec: number;
  readonly rows: number;
  readonly wallSeconds: number;
  /** From the first claim of the rows to the moment none was left pending (drainRate). */
  readonly drainSeconds: number;
}

export interface DrainOptions {
  /** The checkout whose `relay.ts` runs (default: this one); bench/relay-order.ts makes a baseline's. */
  readonly cwd?: string;
  /**
   * `created`: `rows` ChargeCreated rows, one per charge (the common case). `chains`: charges
   * of a ChargeCreated and REFUNDS_PER_CHARGE refunds each, `rows` events in all.
   */
  readonly backlog?: "created" | "chains";
}

// The many-events backlog: 20 refunds per charge (2,000 charges for 42,000 rows).
export const REFUNDS_PER_CHARGE = 20;

/**
 * `bun relay.ts` started on an empty outbox drains a warm-up backlog, then `rows` committed at
 * once; the rate is those rows over the span from their first claim to the end of the drain
 * (support.ts drainRate), so neither the start-up nor the wait for the relay's next poll counts.
 * `env` is added to the relay's (the defaults otherwise).
 */
export async function relayDrain(rows: number, env: Record<string, string> = {}, options: DrainOptions = {}): Promise<RelayDrain> {
  // Another checkout's relay applies its own release's schema at start (before /healthz).
  const db = await freshDatabase("drain", 4, options.cwd === undefined);
  try {
    const started = performance.now();
    const relay = await startProcess("relay", db, { MQTT_TOPIC_PREFIX: `bench/${db.name}/`, ...env }, "/healthz", options.cwd);
    let ids: string[];
    let drainedAt: number;
    try {
      await insertPending(db.sql, Math.min(WARMUP, rows));
      await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
      ids =
        options.backlog === "chains"
          ? (await insertChains(db.sql, Math.ceil(rows / (REFUNDS_PER_CHARGE + 1)), REFUNDS_PER_CHARGE)).flatMap((chain) => chain.events)
          : (await insertPending(db.sql, rows)).map((row) => row.id);
      drainedAt = await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    } finally {
      await relay.child.stop();
    }
    const wallSeconds = (performance.now() - started) / 1000;
    const { rowsPerSec, seconds } = await drainRate(db.sql, ids, drainedAt);
    return { rowsPerSec, rows: ids.length, wallSeconds, drainSeconds: seconds };
  } finally {
    await db.drop();
  }
}

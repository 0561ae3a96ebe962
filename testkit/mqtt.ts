// The one MQTT subscriber of the test kit: it records every message under a prefix, with
// its envelope parsed by lib/charges/events.ts, and waits for a count, for a message that matches,
// or for a barrier (a marker published after the fact, proving nothing else is on its way).
import type { IPublishPacket, MqttClient } from "mqtt";
import { CHARGE_CREATED, parseEnvelope, subscriptionFilter, topicOf, type EventEnvelope } from "../lib/charges/events.ts";
import { connectMqtt } from "../lib/platform/mqtt-connect.ts";

// How long a wait for messages lasts by default: a relay publishes within milliseconds.
const WAIT_TIMEOUT_MS = 10_000;
// Reconnect quickly: tests stop and start brokers.
const RECONNECT_MS = 200;
// A persistent collector's session outlives a broker restart in a test.
const SESSION_EXPIRY_SECONDS = 600;

export interface Received {
  readonly topic: string;
  /** The payload as JSON ({} when it is not JSON). */
  readonly body: Record<string, unknown>;
  /** The payload as an event envelope, if it is one. */
  readonly envelope: EventEnvelope | undefined;
  readonly packet: IPublishPacket;
  /** performance.now() at receipt (performance.timeOrigin + at is the wall clock). */
  readonly at: number;
}

export interface Collector {
  /** Every message received, barriers left out, in arrival order. */
  readonly messages: Received[];
  /** The envelope ids, in arrival order. */
  ids(): string[];
  /** Event id → its first arrival (a redelivery is not a new receipt), for envelopes only. */
  firstArrivals(): Map<string, Received>;
  /** Resolves when at least `count` messages arrived; rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<Received[]>;
  /** Resolves with the first message (already received or to come) that `match` accepts. */
  waitForMessage(match: (message: Received) => boolean, timeoutMs?: number, what?: string): Promise<Received>;
  /**
   * Publishes a marker on the events' topic from a client of its own and waits for it: the
   * broker delivers in order, so whatever it had accepted before has arrived by then.
   */
  barrier(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface CollectOptions {
  readonly clientId?: string;
  /** A session that outlives a disconnect (messages queued while away arrive later). */
  readonly persistent?: boolean;
}

const BARRIER_FIELD = "testkitBarrier";

/**
 * Subscribed to every event type under `prefix` (MQTT 5, or 3.1.1 on a broker that only
 * speaks that, the embedded aedes) before it resolves.
 */
export async function collect(url: string, prefix: string, options: CollectOptions = {}): Promise<Collector> {
  const client = await connectedClient(url, {
    clientId: options.clientId ?? `testkit-collector-${crypto.randomUUID().slice(0, 8)}`,
    clean: !options.persistent,
    properties: options.persistent ? { sessionExpiryInterval: SESSION_EXPIRY_SECONDS } : undefined,
  });
  const messages: Received[] = [];
  const barriers = new Set<string>();
  const listeners = new Set<() => void>();
  client.on("message", (topic, payload, packet) => {
    const body = jsonObject(payload);
    if (typeof body[BARRIER_FIELD] === "string") barriers.add(body[BARRIER_FIELD]);
    else messages.push({ topic, body, envelope: parseEnvelope(payload), packet, at: performance.now() });
    for (const listener of listeners) listener();
  });
  await client.subscribeAsync(subscriptionFilter(prefix), { qos: 1 });

  function until<T>(probe: () => T | undefined, timeoutMs: number, describe: () => string): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const value = probe();
        if (value === undefined) return;
        clearTimeout(timer);
        listeners.delete(check);
        resolve(value);
      };
      const timer = setTimeout(() => {
        listeners.delete(check);
        reject(new Error(`${describe()} within ${timeoutMs} ms`));
      }, timeoutMs);
      listeners.add(check);
      check();
    });
  }

  return {
    messages,
    ids: () => messages.map((m) => String(m.body.id)),
    firstArrivals() {
      const first = new Map<string, Received>();
      for (const m of messages) if (m.envelope && !first.has(m.envelope.id)) first.set(m.envelope.id, m);
      return first;
    },
    waitFor: (count, timeoutMs = WAIT_TIMEOUT_MS) =>
      until(() => (messages.length >= count ? messages : undefined), timeoutMs, () => `expected ${count} messages, got ${messages.length}`),
    waitForMessage: (match, timeoutMs = WAIT_TIMEOUT_MS, what = "a matching message") =>
      until(() => messages.find(match), timeoutMs, () => `no ${what} among ${messages.length} messages`),
    async barrier(timeoutMs = WAIT_TIMEOUT_MS) {
      const marker = crypto.randomUUID();
      const publisher = await rawClient(url);
      try {
        await publisher.publishAsync(topicOf(prefix, CHARGE_CREATED), JSON.stringify({ [BARRIER_FIELD]: marker }), { qos: 1 });
      } finally {
        await publisher.endAsync();
      }
      await until(() => (barriers.has(marker) ? true : undefined), timeoutMs, () => "the barrier did not come back");
    },
    close: () => client.endAsync(),
  };
}

/** A bare client (for publishing test messages), connected, on the protocol the broker speaks. */
export function rawClient(url: string): Promise<MqttClient> {
  return connectedClient(url, {});
}

function connectedClient(url: string, options: Parameters<typeof connectMqtt>[1]): Promise<MqttClient> {
  const client = connectMqtt(url, { reconnectPeriod: RECONNECT_MS, ...options });
  return new Promise((resolve) => client.once("connect", () => resolve(client)));
}

function jsonObject(payload: Uint8Array): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(new TextDecoder().decode(payload));
    return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

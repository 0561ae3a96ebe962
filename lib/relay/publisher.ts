// The relay's MQTT connection: one mqtt.js client (MQTT 5, or 3.1.1 when the broker only
// speaks that), reconnecting with back-off,
// and a publish that resolves on the PUBACK with at most the broker's Receive Maximum
// unacknowledged at once.
import type { IClientPublishOptions, IConnackPacket, IDisconnectPacket, MqttClient } from "mqtt";
import { setImmediate } from "node:timers";
import { connectMqtt } from "../shared/mqtt-connect.ts";
import { describeMqttError } from "../shared/mqtt-errors.ts";
import { EVENT_CONTENT_TYPE } from "../events.ts";

export interface OutboundMessage {
  readonly topic: string;
  /** UTF-8 JSON envelope. */
  readonly payload: string;
  /** MQTT 5 user properties (event-id, event-type, tenant-id, traceparent). */
  readonly userProperties: Readonly<Record<string, string>>;
}

/**
 * A publish that ended because the connection closed before its PUBACK. The oldest publish in
 * flight is the one the broker was reading when it closed (it answers in order), so it alone
 * carries the DISCONNECT's reason code, when the broker sent one (MQTT 5).
 */
export class ConnectionLost extends Error {
  override name = "ConnectionLost";
  constructor(
    /** The DISCONNECT reason code; only on the oldest publish in flight. */
    readonly code: number | undefined,
    readonly oldestInFlight: boolean,
  ) {
    super(
      oldestInFlight
        ? `the broker closed the connection${code === undefined ? " without a reason code" : ""} while this publish was the oldest in flight`
        : "connection to the broker lost",
    );
  }
}

/** Resolves when the broker acknowledged the message; rejects with its reason code otherwise. */
export type PublishFn = (message: OutboundMessage) => Promise<void>;

export interface Broker {
  readonly connected: boolean;
  publish: PublishFn;
  /** Called with true on every CONNACK and false on every lost connection. Returns an unsubscribe. */
  onConnectionChange(listener: (connected: boolean) => void): () => void;
  close(): Promise<void>;
}

export interface BrokerOptions {
  readonly clientId?: string;
  /** Upper bound on unacknowledged publishes; the broker's Receive Maximum may lower it. */
  readonly maxInFlight?: number;
  readonly onError?: (description: string) => void;
  /** The protocol tried first: 5 (the default, falling back to 3.1.1), or 4 to speak 3.1.1 only. */
  readonly protocolVersion?: 4 | 5;
}

// Mosquitto accepts far more, but this is enough to keep a fast broker busy (its PUBACK
// rate stops growing past a few hundred in flight) and bounds what a lost connection
// leaves unacknowledged.
export const MAX_IN_FLIGHT = 1000;
// First reconnect after this; doubles per failed attempt up to the maximum, so a broker that
// is down for long is tried every few seconds, not hammered.
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 5000;
// A broker that accepted TCP but has not sent CONNACK in this time is treated as down.
const CONNECT_TIMEOUT_MS = 5000;
// Keep-alive: a silently dead connection is noticed within 1.5× this.
const KEEPALIVE_S = 15;
// MQTT 5: a Receive Maximum absent from the CONNACK means 65,535.
const PROTOCOL_RECEIVE_MAXIMUM = 65_535;
// A graceful DISCONNECT that has not completed in this time is cut.
const CLOSE_TIMEOUT_MS = 2000;

export function connectBroker(url: string, options: BrokerOptions = {}): Broker {
  const maxInFlight = options.maxInFlight ?? MAX_IN_FLIGHT;
  const client: MqttClient = connectMqtt(url, {
    clientId: options.clientId ?? `charges-relay-${crypto.randomUUID().slice(0, 8)}`,
    protocolVersion: options.protocolVersion ?? 5,
    // The relay's own state is the outbox; nothing needs to outlive a connection.
    clean: true,
    reconnectPeriod: RECONNECT_MIN_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    keepalive: KEEPALIVE_S,
    // We never publish QoS 0; nothing should pile up while offline.
    queueQoSZero: false,
    resubscribe: false,
    onError: (error) => options.onError?.(describeMqttError(error)),
  });
  const listeners = new Set<(connected: boolean) => void>();
  let limit = maxInFlight;
  // Publishes sent and not yet answered, in the order they left (a Map keeps insertion order).
  const unanswered = new Map<number, (error: Error) => void>();
  let sent = 0;
  // The reason code of the DISCONNECT the broker sent on this connection, if it sent one.
  let disconnectReason: number | undefined;
  // Publishes waiting for an in-flight slot, in hand-off (= created_at) order.
  const waiting: Array<{ send: () => void; fail: (error: Error) => void }> = [];

  const notify = (connected: boolean): void => {
    for (const listener of listeners) listener(connected);
  };
  client.on("connect", (connack: IConnackPacket) => {
    client.options.reconnectPeriod = RECONNECT_MIN_MS;
    disconnectReason = undefined;
    // MQTT 5 §3.3.4: never more unacknowledged QoS 1 publishes than the server's Receive
    // Maximum (Mosquitto's max_inflight_messages, 20 by default). mqtt.js does not enforce it.
    limit = Math.min(maxInFlight, connack.properties?.receiveMaximum ?? PROTOCOL_RECEIVE_MAXIMUM);
    refill();
    notify(true);
  });
  client.on("reconnect", () => {
    const period = client.options.reconnectPeriod ?? RECONNECT_MIN_MS;
    client.options.reconnectPeriod = Math.min(RECONNECT_MAX_MS, period * 2);
  });
  client.on("disconnect", (packet: IDisconnectPacket) => {
    disconnectReason = packet.reasonCode;
  });
  client.on("close", () => {
    abandonInFlight();
    notify(false);
  });

  // On a lost connection every unacknowledged publish fails at once (the relay releases
  // those rows and claims them again after reconnecting) instead of waiting out its
  // timeout. They are also dropped from mqtt.js's store, which would otherwise resend them
  // after the reconnect: a second copy of rows that will be published again anyway.
  function abandonInFlight(): void {
    let oldest = true;
    for (const reject of unanswered.values()) {
      reject(new ConnectionLost(oldest ? disconnectReason : undefined, oldest));
      oldest = false;
    }
    unanswered.clear();
    disconnectReason = undefined;
    for (const messageId of Object.keys(client.outgoing)) client.removeOutgoingMessage(Number(messageId));
    const lost = new ConnectionLost(undefined, false);
    for (const entry of waiting.splice(0)) entry.fail(lost);
  }

  // Refills after PUBACKs are deferred to one setImmediate: mqtt.js handles each received
  // packet in its own tick, and a publish per PUBACK would cost a socket write each; sent
  // together, the publishes of one refill leave in one write.
  let refillScheduled = false;
  function refill(): void {
    refillScheduled = false;
    while (unanswered.size < limit && waiting.length > 0) waiting.shift()?.send();
  }
  function scheduleRefill(): void {
    if (refillScheduled || waiting.length === 0) return;
    refillScheduled = true;
    setImmediate(refill);
  }

  function publish(message: OutboundMessage): Promise<void> {
    return new Promise((resolve, reject) => {
      // Not stored for later: the relay releases the row and claims it again once connected.
      if (!client.connected) return reject(new Error("not connected to the broker"));
      const send = (): void => {
        const seq = sent++;
        unanswered.set(seq, reject);
        const opts: IClientPublishOptions = {
          qos: 1,
          retain: false,
          properties: { contentType: EVENT_CONTENT_TYPE, userProperties: { ...message.userProperties } },
        };
        client.publish(message.topic, message.payload, opts, (error) => {
          unanswered.delete(seq);
          scheduleRefill();
          if (error) reject(error);
          else resolve();
        });
      };
      if (unanswered.size < limit && waiting.length === 0) send();
      else waiting.push({ send, fail: reject });
    });
  }

  return {
    get connected() {
      return client.connected;
    },
    publish,
    onConnectionChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async close() {
      listeners.clear();
      const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
      await client.endAsync(!client.connected).catch(() => {});
      clearTimeout(timer);
    },
  };
}

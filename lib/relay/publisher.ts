// The relay's MQTT connection: one mqtt.js client (MQTT 5, or 3.1.1 when the broker only
// speaks that), reconnecting with back-off,
// and a publish that resolves on the PUBACK with at most the broker's Receive Maximum
// unacknowledged at once.
import type { IClientPublishOptions, IConnackPacket, IDisconnectPacket, MqttClient } from "mqtt";
import { connectMqtt } from "../shared/mqtt-connect.ts";
import { describeMqttError } from "../shared/mqtt-errors.ts";
import { EVENT_CONTENT_TYPE } from "../events.ts";
import { InFlightWindow } from "./in-flight.ts";

export interface OutboundMessage {
  readonly topic: string;
  /** UTF-8 JSON envelope. */
  readonly payload: string;
  /** MQTT 5 user properties (event-id, event-type, tenant-id, traceparent). */
  readonly userProperties: Readonly<Record<string, string>>;
}

export { ConnectionLost } from "./in-flight.ts";

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
// A graceful DISCONNECT that has not completed in this time is cut.
const CLOSE_TIMEOUT_MS = 2000;

export function connectBroker(url: string, options: BrokerOptions = {}): Broker {
  const client = openClient(url, options);
  const inFlight = new InFlightWindow(options.maxInFlight ?? MAX_IN_FLIGHT);
  const listeners = new ConnectionListeners();
  trackConnection(client, inFlight, listeners);
  return {
    get connected() {
      return client.connected;
    },
    publish: (message) => publishThrough(client, inFlight, message),
    onConnectionChange: (listener) => listeners.add(listener),
    async close() {
      listeners.clear();
      await closeClient(client);
    },
  };
}

function openClient(url: string, options: BrokerOptions): MqttClient {
  return connectMqtt(url, {
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
}

/** The onConnectionChange listeners: told true on every CONNACK, false on every lost connection. */
class ConnectionListeners {
  private readonly listeners = new Set<(connected: boolean) => void>();

  add(listener: (connected: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  notify(connected: boolean): void {
    for (const listener of this.listeners) listener(connected);
  }

  clear(): void {
    this.listeners.clear();
  }
}

/**
 * Follows the connection: the in-flight window opens on each CONNACK and is abandoned on each close, the
 * reconnect period doubles per failed attempt, and the DISCONNECT's reason code is kept for the
 * publish it is blamed on.
 */
function trackConnection(client: MqttClient, inFlight: InFlightWindow, listeners: ConnectionListeners): void {
  // The reason code of the DISCONNECT the broker sent on this connection, if it sent one.
  let disconnectReason: number | undefined;
  client.on("connect", (connack: IConnackPacket) => {
    client.options.reconnectPeriod = RECONNECT_MIN_MS;
    disconnectReason = undefined;
    inFlight.open(connack.properties?.receiveMaximum);
    listeners.notify(true);
  });
  client.on("reconnect", () => {
    const period = client.options.reconnectPeriod ?? RECONNECT_MIN_MS;
    client.options.reconnectPeriod = Math.min(RECONNECT_MAX_MS, period * 2);
  });
  client.on("disconnect", (packet: IDisconnectPacket) => {
    disconnectReason = packet.reasonCode;
  });
  client.on("close", () => {
    abandonInFlight(client, inFlight, disconnectReason);
    disconnectReason = undefined;
    listeners.notify(false);
  });
}

// On a lost connection every unacknowledged publish fails at once (the relay releases
// those rows and claims them again after reconnecting) instead of waiting out its
// timeout. They are also dropped from mqtt.js's store, which would otherwise resend them
// after the reconnect: a second copy of rows that will be published again anyway.
function abandonInFlight(client: MqttClient, inFlight: InFlightWindow, disconnectReason: number | undefined): void {
  inFlight.abandonUnanswered(disconnectReason);
  for (const messageId of Object.keys(client.outgoing)) client.removeOutgoingMessage(Number(messageId));
  inFlight.failWaiting();
}

function publishThrough(client: MqttClient, inFlight: InFlightWindow, message: OutboundMessage): Promise<void> {
  return new Promise((resolve, reject) => {
    // Not stored for later: the relay releases the row and claims it again once connected.
    if (!client.connected) return reject(new Error("not connected to the broker"));
    const send = (): void => {
      const seq = inFlight.onSent(reject);
      const opts: IClientPublishOptions = {
        qos: 1,
        retain: false,
        properties: { contentType: EVENT_CONTENT_TYPE, userProperties: { ...message.userProperties } },
      };
      client.publish(message.topic, message.payload, opts, (error) => {
        inFlight.answered(seq);
        if (error) reject(error);
        else resolve();
      });
    };
    inFlight.submit({ send, fail: reject });
  });
}

async function closeClient(client: MqttClient): Promise<void> {
  const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
  await client.endAsync(!client.connected).catch(() => {});
  clearTimeout(timer);
}

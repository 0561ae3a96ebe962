// The relay's MQTT connection: one mqtt.js client (MQTT 5, or 3.1.1 when the broker only
// speaks that) keeps the session, reconnecting with back-off; the publishes bypass it. They go
// through a PublishWindow (window.ts: encoded once, one write per turn, at most the broker's
// Receive Maximum unacknowledged), and their PUBACKs are taken off each connection by
// ack-tap.ts: a publish resolves on its PUBACK.
import type { IConnackPacket, IDisconnectPacket, IStream, MqttClient } from "mqtt";
import type { Duplex } from "node:stream";
import { connectMqtt } from "../shared/mqtt-connect.ts";
import { describeMqttError } from "../shared/mqtt-errors.ts";
import { AckTap } from "./ack-tap.ts";
import { PublishWindow, type Delivered, type OutboundMessage } from "./window.ts";


/** Resolves when the broker acknowledged the message; rejects with its reason code otherwise. */
export type PublishFn = (message: OutboundMessage) => Promise<void>;
/** As PublishFn, answering through a callback (PublishWindow.deliver). */
export type DeliverFn = (message: OutboundMessage, done: Delivered) => void;

export interface Broker {
  readonly connected: boolean;
  publish: PublishFn;
  deliver: DeliverFn;
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
export const PROTOCOL_RECEIVE_MAXIMUM = 65_535;
// A graceful DISCONNECT that has not completed in this time is cut.
const CLOSE_TIMEOUT_MS = 2000;

/** A PublishFn (a test's stand-in for the broker) answering as a DeliverFn. */
export function deliverVia(publish: PublishFn): DeliverFn {
  // A synchronous throw reaches the caller, which answers the row (batch.ts publishRow). A
  // rejection without a reason still failed.
  return (message, done) =>
    void publish(message).then(
      () => done(),
      (error: unknown) => done(error ?? new Error("the publish failed without a reason")),
    );
}

export function connectBroker(url: string, options: BrokerOptions = {}): Broker {
  const listeners = new Set<(connected: boolean) => void>();
  // Read only once the client below exists (on publish, on its events).
  const connection = {
    get connected() {
      return client.connected;
    },
    get protocolVersion() {
      return client.options.protocolVersion ?? 5;
    },
    write: (bytes: Buffer) => void client.stream.write(bytes),
  };
  const publishes = new PublishWindow(connection, options.maxInFlight ?? MAX_IN_FLIGHT);
  const client = openClient(url, options, publishes);
  followSession(client, publishes, (connected) => {
    for (const listener of listeners) listener(connected);
  });
  return {
    get connected() {
      return client.connected;
    },
    publish: (message) => publishes.publish(message),
    deliver: (message, done) => publishes.deliver(message, done),
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

/** Opens and closes the window with each connection, and backs off between reconnects. */
function followSession(client: MqttClient, publishes: PublishWindow, notify: (connected: boolean) => void): void {
  // The reason code of the DISCONNECT the broker sent on this connection, if it sent one.
  let disconnectReason: number | undefined;
  client.on("connect", (connack: IConnackPacket) => {
    client.options.reconnectPeriod = RECONNECT_MIN_MS;
    disconnectReason = undefined;
    // Mosquitto's max_inflight_messages, 20 by default; absent means 65,535.
    publishes.opened(connack.properties?.receiveMaximum ?? PROTOCOL_RECEIVE_MAXIMUM);
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
    publishes.closed(disconnectReason);
    disconnectReason = undefined;
    notify(false);
  });
}

/** The mqtt.js client keeping the session; each connection it opens goes through a PUBACK tap feeding `publishes`. */
function openClient(url: string, options: BrokerOptions, publishes: PublishWindow): MqttClient {
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
    tap: (stream: IStream) => {
      // mqtt.js leaves Nagle on: a write of a few publishes would wait for the ACK of the last.
      (stream as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
      const listener = { ack: (id: number, code: number) => publishes.acked(id, code), readDone: () => publishes.readDone() };
      return new AckTap(stream as Duplex, listener) as unknown as IStream;
    },
  });
}

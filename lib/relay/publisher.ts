// The relay's MQTT connections: mqtt.js keeps each session while publishes bypass it (window.ts,
// ack-tap.ts). A message takes the connection its key hashes to, so an aggregate keeps its order.
import type { IConnackPacket, IDisconnectPacket, IStream, MqttClient } from "mqtt";
import type { Duplex } from "node:stream";
import { connectMqtt, type MqttProtocol } from "../platform/mqtt-connect.ts";
import { brokerList, type BrokerList, type BrokerMove, type Brokers } from "../platform/mqtt-brokers.ts";
import { describeMqttError } from "../platform/mqtt-errors.ts";
import { AckTap } from "./ack-tap.ts";
import { PublishWindow, type Delivered, type OutboundMessage } from "./window.ts";

export type PublishFn = (message: OutboundMessage) => Promise<void>;
export type DeliverFn = (message: OutboundMessage, done: Delivered) => void;

export type Broker = ReturnType<typeof connectBroker>;

interface BrokerOptions {
  readonly connections?: number;
  /** Why a connection attempt failed: once per cause, not once per retry. */
  readonly onError?: (description: string) => void;
  readonly version?: MqttProtocol;
  /** With `auto`, the version tried first (default 5). */
  readonly protocolVersion?: 4 | 5;
}

// Unacknowledged publishes per connection: enough for a fast broker, a bound on what a loss leaves.
export const MAX_IN_FLIGHT = 1000;
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 5000;
const CONNECT_TIMEOUT_MS = 5000;
// Keep-alive: a silently dead connection is noticed within 1.5× this.
const KEEPALIVE_S = 15;
export const PROTOCOL_RECEIVE_MAXIMUM = 65_535;
const CLOSE_TIMEOUT_MS = 2000;

/** A test's stand-in PublishFn as a DeliverFn; a synchronous throw reaches the caller. */
export function deliverVia(publish: PublishFn): DeliverFn {
  return (message, done) =>
    void publish(message).then(
      () => done(),
      (error: unknown) => done(error ?? new Error("the publish failed without a reason")),
    );
}

/** The connection a key's messages take: FNV-1a over its UTF-16 code units, modulo `count`. */
function connectionOf(key: string, count: number): number {
  if (count === 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % count;
}

/** The relay's connections to the broker in use of a list, all moving together. */
export function connectBroker(brokers: Brokers, options: BrokerOptions = {}) {
  const list = brokerList(brokers);
  const listeners = new Set<(connected: boolean) => void>();
  const base = `charges-relay-${crypto.randomUUID().slice(0, 8)}`;
  const allConnected = (): boolean => connections.every((c) => c.client.connected);
  let allUp = false;
  let lastError: string | undefined;
  // The state of the whole: a batch needs whichever connection its rows hash to.
  const changed = (): void => {
    const now = allConnected();
    if (now) lastError = undefined;
    if (now === allUp) return;
    allUp = now;
    for (const listener of listeners) listener(now);
  };
  const failed = (description: string): void => {
    if (description === lastError) return;
    lastError = description;
    options.onError?.(description);
  };
  const connections = Array.from({ length: Math.max(1, options.connections ?? 1) }, (_, i) =>
    openConnection(list, { ...options, clientId: i === 0 ? base : `${base}-${i + 1}`, onError: failed }, changed),
  );
  const count = connections.length;
  const windowOf = (message: OutboundMessage): PublishWindow =>
    (connections[connectionOf(message.key, count)] as ReturnType<typeof openConnection>).window;
  return {
    get connected(): boolean {
      return allConnected();
    },
    /** Why the last connection attempt failed, until every connection is up again. */
    get lastError(): string | undefined {
      return lastError;
    },
    /** Its password masked. */
    get url(): string {
      return list.inUse;
    },
    publish: ((message) => windowOf(message).publish(message)) satisfies PublishFn,
    deliver: ((message, done) => windowOf(message).deliver(message, done)) satisfies DeliverFn,
    /** True when the last connection is up, false when the first is lost. Returns an unsubscribe. */
    onConnectionChange(listener: (connected: boolean) => void): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    /** Once per move to the next broker of the list. Returns an unsubscribe. */
    onMove: (listener: (move: BrokerMove) => void): (() => void) => list.onMove(listener),
    async close(): Promise<void> {
      listeners.clear();
      await Promise.all(connections.map((c) => closeClient(c.client)));
    },
  };
}

function openConnection(list: BrokerList, options: BrokerOptions & { clientId: string }, notify: () => void) {
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
  const window = new PublishWindow(connection, MAX_IN_FLIGHT);
  const client = connectMqtt(list, {
    clientId: options.clientId,
    version: options.version ?? "auto",
    protocolVersion: options.protocolVersion ?? 5,
    // The relay's own state is the outbox; nothing needs to outlive a connection.
    clean: true,
    reconnectPeriod: RECONNECT_MIN_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    keepalive: KEEPALIVE_S,
    queueQoSZero: false,
    resubscribe: false,
    onError: (error) => options.onError?.(describeMqttError(error)),
    tap: (stream: IStream) => {
      // mqtt.js leaves Nagle on: a write of a few publishes would wait for the ACK of the last.
      (stream as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
      return new AckTap(stream as Duplex, window) as unknown as IStream;
    },
  });
  followSession(client, window, notify);
  return { client, window };
}

async function closeClient(client: MqttClient): Promise<void> {
  const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
  await client.endAsync(!client.connected).catch(() => {});
  clearTimeout(timer);
}

function followSession(client: MqttClient, publishes: PublishWindow, notify: () => void): void {
  let disconnectReason: number | undefined;
  client.on("connect", (connack: IConnackPacket) => {
    client.options.reconnectPeriod = RECONNECT_MIN_MS;
    disconnectReason = undefined;
    publishes.opened(connack.properties?.receiveMaximum ?? PROTOCOL_RECEIVE_MAXIMUM);
    notify();
  });
  client.on("reconnect", () => {
    const period = client.options.reconnectPeriod ?? RECONNECT_MIN_MS;
    client.options.reconnectPeriod = Math.min(RECONNECT_MAX_MS, period * 2);
  });
  client.on("disconnect", (packet: IDisconnectPacket) => (disconnectReason = packet.reasonCode));
  client.on("close", () => {
    publishes.closed(disconnectReason);
    disconnectReason = undefined;
    notify();
  });
}

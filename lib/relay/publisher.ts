// The relay's MQTT connection: one mqtt.js client (MQTT 5, or 3.1.1 when the broker only
// speaks that) keeps the session, reconnecting with back-off; the publishes bypass it. Each is
// encoded once (publish-packet.ts), the publishes of one tick leave in one write, and their PUBACKs
// are taken off the connection by ack-tap.ts: a publish resolves on its PUBACK, with at most the
// broker's Receive Maximum unacknowledged at once.
import type { IConnackPacket, IDisconnectPacket, IStream, MqttClient } from "mqtt";
import type { Duplex } from "node:stream";
import { AckTap } from "./ack-tap.ts";
import { encodePublish } from "./publish-packet.ts";
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

/** A PUBACK with a failure reason code (0x80 and above). */
export class PublishRefused extends Error {
  override name = "PublishRefused";
  constructor(readonly code: number) {
    super(`the broker refused the publish (PUBACK reason code 0x${code.toString(16).padStart(2, "0")})`);
  }
}

// PUBACK reason codes from here up are failures (MQTT 5 §3.4.2.1); below (0x00 success, 0x10
// no matching subscribers) the broker accepted the message.
const FIRST_FAILURE_CODE = 0x80;
// Packet identifiers are 1..65535 (MQTT 5 §2.2.1); 0 is not one.
const MAX_PACKET_ID = 0xffff;

interface InFlight {
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

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
    tap: (stream: IStream) => {
      // mqtt.js leaves Nagle on: a write of a few publishes would wait for the ACK of the last.
      (stream as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
      return new AckTap(stream as Duplex, { ack: acked, acksRead: refill }) as unknown as IStream;
    },
  });
  const listeners = new Set<(connected: boolean) => void>();
  let limit = maxInFlight;
  // Publishes sent and not yet answered, by packet identifier, in the order they left (a Map
  // keeps insertion order, and an identifier is only reused once its PUBACK is back).
  const inFlight = new Map<number, InFlight>();
  let lastId = 0;
  // The reason code of the DISCONNECT the broker sent on this connection, if it sent one.
  let disconnectReason: number | undefined;
  // Publishes waiting for an in-flight slot, in hand-off (= created_at) order.
  const waiting: Array<{ send: () => void; fail: (error: Error) => void }> = [];
  // Encoded publishes not yet written: those of one tick leave in one write.
  let unwritten: Buffer[] = [];

  const notify = (connected: boolean): void => {
    for (const listener of listeners) listener(connected);
  };
  client.on("connect", (connack: IConnackPacket) => {
    client.options.reconnectPeriod = RECONNECT_MIN_MS;
    disconnectReason = undefined;
    // MQTT 5 §3.3.4: never more unacknowledged QoS 1 publishes than the server's Receive
    // Maximum (Mosquitto's max_inflight_messages, 20 by default).
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

  function acked(messageId: number, reasonCode: number): void {
    const entry = inFlight.get(messageId);
    // Not one of ours on this connection: answered after its connection was given up.
    if (!entry) return;
    inFlight.delete(messageId);
    if (reasonCode >= FIRST_FAILURE_CODE) entry.reject(new PublishRefused(reasonCode));
    else entry.resolve();
  }

  // On a lost connection every unacknowledged publish fails at once (the relay releases
  // those rows and claims them again after reconnecting) instead of waiting out its timeout.
  function abandonInFlight(): void {
    let oldest = true;
    for (const entry of inFlight.values()) {
      entry.reject(new ConnectionLost(oldest ? disconnectReason : undefined, oldest));
      oldest = false;
    }
    inFlight.clear();
    unwritten = [];
    disconnectReason = undefined;
    const lost = new ConnectionLost(undefined, false);
    for (const entry of waiting.splice(0)) entry.fail(lost);
  }

  // Called after every PUBACK of one read has been handled, so the publishes they make room
  // for leave together, in one write, without waiting for another turn of the event loop.
  function refill(): void {
    while (inFlight.size < limit && waiting.length > 0) waiting.shift()?.send();
  }

  function flush(): void {
    const chunks = unwritten;
    unwritten = [];
    // Dropped when the connection closed meanwhile: their publishes were failed with it.
    if (chunks.length === 0 || !client.connected) return;
    client.stream.write(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
  }

  function nextId(): number {
    do lastId = lastId === MAX_PACKET_ID ? 1 : lastId + 1;
    while (inFlight.has(lastId));
    return lastId;
  }

  function write(message: OutboundMessage, entry: InFlight): void {
    const fields = { messageId: nextId(), topic: message.topic, payload: message.payload, contentType: EVENT_CONTENT_TYPE, userProperties: message.userProperties };
    let bytes: Buffer;
    try {
      // MQTT 3.1.1 has no properties; the envelope carries the same information.
      bytes = encodePublish(fields, client.options.protocolVersion ?? 5);
    } catch (error) {
      // A row too large for the protocol fails (and is parked in time) without reaching the broker.
      entry.reject(error as Error);
      return;
    }
    inFlight.set(fields.messageId, entry);
    if (unwritten.length === 0) process.nextTick(flush);
    unwritten.push(bytes);
  }

  function publish(message: OutboundMessage): Promise<void> {
    return new Promise((resolve, reject) => {
      // Not stored for later: the relay releases the row and claims it again once connected.
      if (!client.connected) return reject(new Error("not connected to the broker"));
      const entry: InFlight = { resolve, reject };
      if (inFlight.size < limit && waiting.length === 0) write(message, entry);
      else waiting.push({ send: () => write(message, entry), fail: reject });
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

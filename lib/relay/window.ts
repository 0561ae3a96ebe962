// The publishes on one MQTT connection: those of one turn written together, at most Receive
// Maximum unacknowledged, the rest waiting in order, each settled by its PUBACK or the connection's loss.
import { EVENT_CONTENT_TYPE } from "../charges/events.ts";
import { encodePublish } from "./publish-packet.ts";

/** Read once, when the PUBLISH is encoded; `key` (the aggregate id) picks the connection. */
export interface OutboundMessage {
  readonly key: string;
  readonly topic: string;
  readonly payload: string;
  readonly userProperties: Readonly<Record<string, string>>;
}

/** The oldest in flight (the one the broker was reading) gets the DISCONNECT's reason code. */
export class ConnectionLost extends Error {
  override name = "ConnectionLost";
  constructor(
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

export class PublishRefused extends Error {
  override name = "PublishRefused";
  constructor(readonly code: number) {
    super(`the broker refused the publish (PUBACK reason code 0x${code.toString(16).padStart(2, "0")})`);
  }
}

interface WindowConnection {
  readonly connected: boolean;
  readonly protocolVersion: number;
  write(bytes: Buffer): void;
}

// PUBACK reason codes from here up are failures (MQTT 5 §3.4.2.1); 0x10 "no matching subscribers" is not.
const FIRST_FAILURE_CODE = 0x80;
const MAX_PACKET_ID = 0xffff;
const PINGREQ = Buffer.from([0xc0, 0x00]);
// The waiting queue drops its sent head once this long (an index, not Array.shift, which moves every entry).
const QUEUE_COMPACT_AT = 1024;

/** Called once per message: with no argument on its PUBACK, with the error (never undefined) otherwise. */
export type Delivered = (error?: unknown) => void;

interface Pending {
  readonly message: OutboundMessage;
  readonly done: Delivered;
}

export class PublishWindow {
  private limit: number;
  // In the order they left (Map insertion order).
  private readonly inFlight = new Map<number, Pending>();
  private waiting: Pending[] = [];
  private waitingHead = 0;
  private lastId = 0;
  private unwritten: Buffer[] = [];
  private readonly flush = (): void => this.writeOut();
  // At most one PINGREQ per PUBACK: a broker that answers pings but holds PUBACKs is not pinged in a loop.
  private ackedSinceNudge = true;

  constructor(
    private readonly connection: WindowConnection,
    private readonly maxInFlight: number,
  ) {
    this.limit = maxInFlight;
  }

  /** A new connection: at most `receiveMaximum` unacknowledged on it (MQTT 5 §3.3.4). */
  opened(receiveMaximum: number): void {
    this.limit = Math.min(this.maxInFlight, receiveMaximum);
    this.refill();
  }

  publish(message: OutboundMessage): Promise<void> {
    return new Promise((resolve, reject) => this.deliver(message, (error) => (error ? reject(error) : resolve())));
  }

  /** No promise per message on the hot path. */
  deliver(message: OutboundMessage, done: Delivered): void {
    // Not kept for later: the relay releases the row and claims it again once connected.
    if (!this.connection.connected) return done(new Error("not connected to the broker"));
    const pending: Pending = { message, done };
    if (this.inFlight.size < this.limit && this.waitingHead === this.waiting.length) this.send(pending);
    else this.waiting.push(pending);
  }

  /** A PUBACK; one for an identifier not in flight (a connection given up) is ignored. */
  acked(messageId: number, reasonCode: number): void {
    const pending = this.inFlight.get(messageId);
    if (!pending) return;
    this.inFlight.delete(messageId);
    this.ackedSinceNudge = true;
    if (reasonCode >= FIRST_FAILURE_CODE) pending.done(new PublishRefused(reasonCode));
    else pending.done();
  }

  private refill(): void {
    while (this.inFlight.size < this.limit && this.waitingHead < this.waiting.length) {
      this.send(this.waiting[this.waitingHead++] as Pending);
    }
    if (this.waitingHead === this.waiting.length) {
      this.waiting = [];
      this.waitingHead = 0;
    } else if (this.waitingHead >= QUEUE_COMPACT_AT) {
      this.waiting = this.waiting.slice(this.waitingHead);
      this.waitingHead = 0;
    }
  }

  // With nothing to send and PUBACKs to come, a PINGREQ carries the TCP ACK Mosquitto (without
  // TCP_NODELAY) waits for before its next PUBACKs; not when this turn writes (PUBACK behind PINGRESP).
  readDone(): void {
    this.refill();
    if (this.unwritten.length > 0 || this.inFlight.size === 0 || !this.ackedSinceNudge) return;
    this.ackedSinceNudge = false;
    this.queue(PINGREQ);
  }

  /** Every publish in flight or waiting fails at once, not at its timeout. */
  closed(disconnectReason: number | undefined): void {
    let oldest = true;
    for (const pending of this.inFlight.values()) {
      pending.done(new ConnectionLost(oldest ? disconnectReason : undefined, oldest));
      oldest = false;
    }
    this.inFlight.clear();
    this.unwritten = [];
    this.ackedSinceNudge = true;
    const waiting = this.waiting.slice(this.waitingHead);
    this.waiting = [];
    this.waitingHead = 0;
    const lost = new ConnectionLost(undefined, false);
    for (const pending of waiting) pending.done(lost);
  }

  private nextId(): number {
    do this.lastId = this.lastId === MAX_PACKET_ID ? 1 : this.lastId + 1;
    while (this.inFlight.has(this.lastId));
    return this.lastId;
  }

  private send(pending: Pending): void {
    const { topic, payload, userProperties } = pending.message;
    const messageId = this.nextId();
    let bytes: Buffer;
    try {
      bytes = encodePublish({ messageId, topic, payload, contentType: EVENT_CONTENT_TYPE, userProperties }, this.connection.protocolVersion);
    } catch (error) {
      pending.done(error as Error);
      return;
    }
    this.inFlight.set(messageId, pending);
    this.queue(bytes);
  }

  private queue(bytes: Buffer): void {
    if (this.unwritten.length === 0) process.nextTick(this.flush);
    this.unwritten.push(bytes);
  }

  private writeOut(): void {
    const chunks = this.unwritten;
    this.unwritten = [];
    // Closed meanwhile: their publishes failed with it.
    if (chunks.length === 0 || !this.connection.connected) return;
    this.connection.write(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
  }
}

// The relay's in-flight window on one MQTT connection: at most `limit` publishes unacknowledged
// at once (the broker's Receive Maximum may lower it), the rest waiting in hand-off order, and,
// when the connection closes, every publish in it failed at once with the blame put on the
// oldest one.
import { setImmediate } from "node:timers";

// MQTT 5: a Receive Maximum absent from the CONNACK means 65,535.
const PROTOCOL_RECEIVE_MAXIMUM = 65_535;

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

/** A publish handed to the window: `send` puts it on the wire, `fail` ends it unsent. */
export interface PendingPublish {
  readonly send: () => void;
  readonly fail: (error: Error) => void;
}

export class InFlightWindow {
  private limit: number;
  // Publishes sent and not yet answered, in the order they left (a Map keeps insertion order).
  private readonly unanswered = new Map<number, (error: Error) => void>();
  private sent = 0;
  // Publishes waiting for an in-flight slot, in hand-off (= created_at) order.
  private readonly waiting: PendingPublish[] = [];
  private refillScheduled = false;

  constructor(private readonly maxInFlight: number) {
    this.limit = maxInFlight;
  }

  /** A CONNACK: the window takes the broker's Receive Maximum and sends what it can. */
  open(receiveMaximum: number | undefined): void {
    // MQTT 5 §3.3.4: never more unacknowledged QoS 1 publishes than the server's Receive
    // Maximum (Mosquitto's max_inflight_messages, 20 by default). mqtt.js does not enforce it.
    this.limit = Math.min(this.maxInFlight, receiveMaximum ?? PROTOCOL_RECEIVE_MAXIMUM);
    this.refill();
  }

  /** Sends now when a slot is free and nothing waits ahead of it; queues it otherwise. */
  submit(publish: PendingPublish): void {
    if (this.unanswered.size < this.limit && this.waiting.length === 0) publish.send();
    else this.waiting.push(publish);
  }

  /** A publish went on the wire; it holds a slot until answered(). Returns its ticket. */
  onSent(reject: (error: Error) => void): number {
    const seq = this.sent++;
    this.unanswered.set(seq, reject);
    return seq;
  }

  /** The broker answered (or mqtt.js gave up on) the publish with this ticket. */
  answered(seq: number): void {
    this.unanswered.delete(seq);
    this.scheduleRefill();
  }

  /**
   * The connection closed: every unacknowledged publish fails at once, the oldest carrying the
   * DISCONNECT's reason code (`reason`, when the broker sent one). Publishes still waiting for a
   * slot fail through failWaiting().
   */
  abandonUnanswered(reason: number | undefined): void {
    let oldest = true;
    for (const reject of this.unanswered.values()) {
      reject(new ConnectionLost(oldest ? reason : undefined, oldest));
      oldest = false;
    }
    this.unanswered.clear();
  }

  failWaiting(): void {
    const lost = new ConnectionLost(undefined, false);
    for (const entry of this.waiting.splice(0)) entry.fail(lost);
  }

  // Refills after PUBACKs are deferred to one setImmediate: mqtt.js handles each received
  // packet in its own tick, and a publish per PUBACK would cost a socket write each; sent
  // together, the publishes of one refill leave in one write.
  private readonly refill = (): void => {
    this.refillScheduled = false;
    while (this.unanswered.size < this.limit && this.waiting.length > 0) this.waiting.shift()?.send();
  };

  private scheduleRefill(): void {
    if (this.refillScheduled || this.waiting.length === 0) return;
    this.refillScheduled = true;
    setImmediate(this.refill);
  }
}

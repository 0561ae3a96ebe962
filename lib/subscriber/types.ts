// The subscriber engine's contract: what startSubscriber takes and returns (index.ts's
// createSubscriber is built on it).
import type { Meter } from "@opentelemetry/api";
import type { Sql, Tx } from "../platform/db.ts";
import type { MqttProtocol } from "../platform/config.ts";
import type { BrokerMove, Brokers } from "../platform/mqtt-brokers.ts";
import type { Logger } from "../platform/log.ts";
import type { EventEnvelope } from "../charges/events.ts";
import type { DeadLetter } from "./dead-letter.ts";
import type { Counts } from "./report.ts";

type OutboxEvent = EventEnvelope;

export interface Delivery {
  readonly event: OutboxEvent;
  readonly topic: string;
  /** Already in the inbox: the handler did not run. */
  readonly duplicate: boolean;
  /** The broker flagged it DUP; false for an event processed from subscriber_held_events. */
  readonly redelivered: boolean;
  /** It came ahead of its turn and waited in subscriber_held_events until now. */
  readonly held: boolean;
  /** Processed past a missing predecessor, after SUBSCRIBER_GAP_TIMEOUT_MS. */
  readonly gapSkipped: boolean;
  /** Never received from the broker: read from the API's GET /charges/:id/events to fill a gap. */
  readonly filled: boolean;
}

/** An event that came ahead of its turn, kept in subscriber_held_events (and acknowledged). */
export interface Held {
  readonly event: OutboxEvent & { readonly sequence: number };
  readonly topic: string;
  readonly expected: number;
}

export interface SubscriberOptions {
  readonly sql: Sql;
  /** Several brokers (MQTT_URL's list): it connects to one and moves to the next when that one is lost. */
  readonly mqttUrl: Brokers;
  /** Default auto: 5, falling back to 3.1.1. */
  readonly mqttProtocol?: MqttProtocol;
  readonly topic: string;
  /** The inbox's consumer name; also the default MQTT client id. */
  readonly consumer: string;
  readonly clientId?: string;
  readonly sessionExpirySeconds?: number;
  /**
   * Its writes through `tx` commit with the inbox row. If the connection is lost meanwhile, a
   * statement on `tx` never settles: that attempt is abandoned and retried in a new transaction.
   * Called one at a time and in sequence order per aggregate, across a share group too; calls
   * for different aggregates may overlap (the gap sweep beside the event in hand).
   */
  readonly handler?: (event: OutboxEvent, tx: Tx) => Promise<void> | void;
  /** After the commit, before the PUBACK (for a held event: when it is processed, its PUBACK long sent). */
  readonly onDelivery?: (delivery: Delivery) => void;
  /** An event kept until its turn, after the commit, before the PUBACK; a redelivery of a held event is not told again. */
  readonly onHeld?: (held: Held) => void;
  /** A message acknowledged without processing because it is not an event. */
  readonly onRejected?: (topic: string, reason: string) => void;
  /** An event the handler kept failing on, once kept in subscriber_dead_letters, before the PUBACK. */
  readonly onDeadLetter?: (letter: DeadLetter) => void;
  readonly onError?: (description: string) => void;
  /** A move to the next broker of the list after the one in use was lost: once per loss. */
  readonly onBrokerMove?: (move: BrokerMove) => void;
  /** Where the gap lines go (warn: held, skipped after the timeout, late); none by default. */
  readonly log?: Logger;
  /** How long a held event waits for its predecessor (default 5 minutes). */
  readonly gapTimeoutMs?: number;
  /** Given, a gap that lasted `fillAfterMs` is filled from GET /charges/:id/events before the gap timeout. */
  readonly api?: GapFillApi;
  readonly meter?: Meter;
  /** Handler failures before the event is kept as a dead letter (MAX_HANDLER_ATTEMPTS by default). */
  readonly maxHandlerAttempts?: number;
  /** False: every event is processed in arrival order, sequences ignored (true by default). */
  readonly ordered?: boolean;
  /**
   * How a message is read. Without it, parseEnvelope: a non-envelope is rejected (counted,
   * acknowledged, not kept); with it, a malformed message is kept as a dead letter, then acknowledged.
   */
  readonly check?: (payload: Uint8Array | string) => Checked;
  /** A malformed message (see `check`), once kept in subscriber_dead_letters, before the PUBACK. */
  readonly onMalformed?: (letter: DeadLetter) => void;
}

export type Checked =
  | { readonly kind: "event"; readonly event: OutboxEvent }
  /** `eventId`: the id it names, when it names a valid one. */
  | { readonly kind: "malformed"; readonly reason: string; readonly eventId?: string };

export interface GapFillApi {
  /** The API's origin (a path prefix is kept), no trailing slash. */
  readonly url: string;
  /** A bearer token of the events' tenant, asked before each request. */
  readonly token: () => string | Promise<string>;
  /** How long a gap lasts before the API is asked (less than the gap timeout). */
  readonly fillAfterMs: number;
  /** The global fetch by default. */
  readonly fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

export interface Subscriber extends Readonly<Counts> {
  readonly connected: boolean;
  /** Its password masked. */
  readonly broker: string;
  readonly ready: Promise<void>;
  /** Disconnects, keeping the session: what arrives meanwhile waits at the broker. */
  close(): Promise<void>;
}

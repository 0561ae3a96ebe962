// The subscriber engine's contract: what startSubscriber takes and what it returns (the
// library's createSubscriber, index.ts, is built on it).
import type { Meter } from "@opentelemetry/api";
import type { Sql, Tx } from "../platform/db.ts";
import type { MqttProtocol } from "../platform/config.ts";
import type { BrokerMove, Brokers } from "../platform/mqtt-brokers.ts";
import type { Logger } from "../platform/log.ts";
import type { EventEnvelope } from "../charges/events.ts";
import type { DeadLetter } from "./inbox-sql.ts";

type OutboxEvent = EventEnvelope;

export interface Delivery {
  readonly event: OutboxEvent;
  readonly topic: string;
  /** Already in the inbox: the handler did not run again. */
  readonly duplicate: boolean;
  /** The broker flagged it as a resend (DUP); false for an event processed from subscriber_held_events. */
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
  /** The sequence the aggregate waits for. */
  readonly expected: number;
}

export interface SubscriberOptions {
  readonly sql: Sql;
  /** One broker, or several (MQTT_URL's list): it connects to one and moves to the next when that one is lost. */
  readonly mqttUrl: Brokers;
  /** MQTT_PROTOCOL_VERSION (default auto: 5, falling back to 3.1.1). */
  readonly mqttProtocol?: MqttProtocol;
  /** Topic filter, e.g. `${MQTT_TOPIC_PREFIX}charges/#`. */
  readonly topic: string;
  /** The inbox's consumer name; also the default MQTT client id. */
  readonly consumer: string;
  readonly clientId?: string;
  readonly sessionExpirySeconds?: number;
  /**
   * The consumer's own work; its writes through `tx` commit together with the inbox row. If the
   * database connection is lost meanwhile, a statement on `tx` never settles: that attempt is
   * abandoned and the event is tried again in a new transaction. Called for the events of one
   * aggregate one at a time and in sequence order, across the members of a share group too;
   * for different aggregates calls may overlap (the gap sweep beside the event in hand).
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
  /** SUBSCRIBER_GAP_TIMEOUT_MS: how long a held event waits for its predecessor (default 5 minutes). */
  readonly gapTimeoutMs?: number;
  /**
   * The API to fill a gap from (SUBSCRIBER_API_URL, SUBSCRIBER_API_TOKEN,
   * SUBSCRIBER_GAP_FILL_AFTER_MS): a gap that lasted `fillAfterMs` is filled from GET
   * /charges/:id/events before the gap timeout. Without it gaps wait for the broker alone.
   */
  readonly api?: GapFillApi;
  /** Where the subscriber_* metrics are counted; the global meter by default. */
  readonly meter?: Meter;
  /** Handler failures before the event is kept as a dead letter (MAX_HANDLER_ATTEMPTS by default). */
  readonly maxHandlerAttempts?: number;
  /** False: every event is processed in arrival order, sequences ignored (true by default). */
  readonly ordered?: boolean;
  /**
   * How a received message is read. Without it, parseEnvelope: a message that is not an
   * envelope is rejected (counted, acknowledged, not kept). With it, a message it finds
   * malformed is kept in subscriber_dead_letters with the reason, then acknowledged.
   */
  readonly check?: (payload: Uint8Array | string) => Checked;
  /** A malformed message (see `check`), once kept in subscriber_dead_letters, before the PUBACK. */
  readonly onMalformed?: (letter: DeadLetter) => void;
}

/** A received message as `check` reads it. */
export type Checked =
  | { readonly kind: "event"; readonly event: OutboxEvent }
  /** `eventId`: the id it names, when it names a valid one. */
  | { readonly kind: "malformed"; readonly reason: string; readonly eventId?: string };

export interface GapFillApi {
  /** The API's origin (a path prefix is kept), without a trailing slash. */
  readonly url: string;
  /** A bearer token of the events' tenant, asked before each request. */
  readonly token: () => string | Promise<string>;
  /** How long a gap lasts before the API is asked (less than the gap timeout). */
  readonly fillAfterMs: number;
  /** A fetch of your own (a test's); the global one by default. */
  readonly fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

export interface Subscriber {
  readonly processed: number;
  readonly duplicates: number;
  readonly rejected: number;
  /** Messages `check` found malformed, kept in subscriber_dead_letters. */
  readonly malformed: number;
  /** Events kept in subscriber_dead_letters by this subscriber. */
  readonly deadLettered: number;
  /** Events this subscriber kept in subscriber_held_events because they came ahead of their turn. */
  readonly held: number;
  /** Events this subscriber processed past a missing predecessor, after the gap timeout. */
  readonly gapsSkipped: number;
  /** Events this subscriber read from the API and processed to fill a gap. */
  readonly gapsFilled: number;
  readonly connected: boolean;
  /** The broker in use, its password masked. */
  readonly broker: string;
  /** Resolves once subscribed. */
  readonly ready: Promise<void>;
  /** Disconnects, keeping the session: what arrives meanwhile waits at the broker. */
  close(): Promise<void>;
}

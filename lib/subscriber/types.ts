// The subscriber engine's contract: what startSubscriber takes and returns.
import type { Sql, Tx } from "../platform/db.ts";
import type { MqttProtocol } from "../platform/config.ts";
import type { Brokers } from "../platform/mqtt-brokers.ts";
import type { EventEnvelope } from "../charges/events.ts";
import type { CreateSubscriberOptions } from "./index.ts";
import type { Counts } from "./report.ts";

export interface Delivery {
  readonly event: EventEnvelope;
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
  readonly event: EventEnvelope & { readonly sequence: number };
  readonly topic: string;
  readonly expected: number;
}

/** The library's options, with the engine's own connection, topic, handler and reading of a message. */
export interface SubscriberOptions extends Omit<CreateSubscriberOptions, LibraryOnly> {
  readonly sql: Sql;
  /** MQTT_URL's brokers: it connects to one and moves to the next when that one is lost. */
  readonly mqttUrl: Brokers;
  readonly mqttProtocol?: MqttProtocol;
  readonly topic: string;
  /**
   * Its writes through `tx` commit with the inbox row; a lost connection leaves a statement on
   * `tx` unsettled, so that attempt is abandoned and retried in a new transaction. Called one at
   * a time and in sequence order per aggregate, across a share group too; calls for different
   * aggregates may overlap (the gap sweep beside the event in hand).
   */
  readonly handler?: (event: EventEnvelope, tx: Tx) => Promise<void> | void;
  /** A message acknowledged without processing because it is not an event. */
  readonly onRejected?: (topic: string, reason: string) => void;
  readonly api?: GapFillApi;
  /**
   * How a message is read. Without it, parseEnvelope: a non-envelope is rejected (counted,
   * acknowledged, not kept); with it, a malformed message is kept as a dead letter, then acknowledged.
   */
  readonly check?: (payload: Uint8Array | string) => Checked;
}

type LibraryOnly = "sql" | "mqttUrl" | "handle" | "onUnknown" | "topicPrefix" | "shareGroup" | "protocol" | "api" | "inboxRetentionSeconds";

export type Checked =
  | { readonly kind: "event"; readonly event: EventEnvelope }
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

// The subscriber engine's contract: what startSubscriber takes and returns.
import type { Sql, Tx } from "../platform/db.ts";
import type { MqttProtocol } from "../platform/config.ts";
import type { BrokerMove, Brokers } from "../platform/mqtt-brokers.ts";
import type { EventEnvelope } from "../charges/events.ts";
import type { Meter } from "@opentelemetry/api";
import type postgres from "postgres";
import type { Logger } from "../platform/log.ts";
import type { DeadLetter } from "./sequence-sql.ts";
import type { ChargeEvent, Checked, UnknownEvent } from "./typed-events.ts";

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

export type SequencedEvent = EventEnvelope & { readonly sequence: number };

/** An event that came ahead of its turn, kept in subscriber_held_events (and acknowledged). */
export interface Held {
  readonly event: SequencedEvent;
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
  // One at a time and in sequence order per aggregate, across a share group too; different
  // aggregates may overlap (the gap sweep beside the event in hand).
  readonly handler?: (event: EventEnvelope, tx: Tx) => Promise<void> | void;
  readonly onRejected?: (topic: string, reason: string) => void;
  readonly api?: GapFillApi;
  /** Without it, a non-envelope is only rejected; with it, a malformed message becomes a dead letter. */
  readonly check?: (payload: Uint8Array | string) => Checked;
}

type LibraryOnly = "sql" | "mqttUrl" | "handle" | "onUnknown" | "topicPrefix" | "shareGroup" | "protocol" | "api" | "inboxRetentionSeconds";

export interface GapFillApi {
  /** No trailing slash. */
  readonly url: string;
  /** A bearer token of the events' tenant, asked before each request. */
  readonly token: () => string | Promise<string>;
  readonly fillAfterMs: number;
  readonly fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

export type SubscriberTx = Tx;

export interface CreateSubscriberOptions {
  /** Several to fail over between (mqtt://, mqtts://, ws://, wss://). */
  readonly mqttUrl: string | readonly string[];
  /** The subscriber's own database (migrated by migrateSubscriber). */
  readonly sql: postgres.Sql;
  /** One per kind of consumer; also the default MQTT client id. */
  readonly consumer: string;
  /** Its writes through `tx` commit together with the inbox row, once per event id. */
  readonly handle: (event: ChargeEvent, tx: SubscriberTx) => Promise<void> | void;
  /** An event of a type this version does not know, in its inbox transaction; without it, counted only. */
  readonly onUnknown?: (event: UnknownEvent, tx: SubscriberTx) => Promise<void> | void;
  readonly topicPrefix?: string;
  /** An MQTT 5 shared subscription: the members of a group split the stream (each needs its own `clientId`). */
  readonly shareGroup?: string;
  readonly clientId?: string;
  readonly protocol?: MqttProtocol;
  readonly sessionExpirySeconds?: number;
  /** Order per charge by `sequence` (true by default); false: arrival order. */
  readonly ordered?: boolean;
  /** How long an event ahead of its turn waits for its predecessor before it goes anyway (5 minutes). */
  readonly gapTimeoutMs?: number;
  /** The API to fill a gap from, GET /charges/:id/events, once it lasted `fillAfterMs` (5 s). */
  readonly api?: { readonly url: string; readonly token: string | (() => string | Promise<string>); readonly fillAfterMs?: number };
  /** Handler failures before its event is kept as a dead letter (5). */
  readonly maxHandlerAttempts?: number;
  /** Inbox rows older than this are deleted (7 days); false: never. Keep it above the session expiry. */
  readonly inboxRetentionSeconds?: number | false;
  /** After the commit, before the PUBACK; for a held event, when it is processed (its PUBACK long sent). */
  readonly onDelivery?: (delivery: Delivery) => void;
  /** An event kept until its turn; a redelivery of it is not told again. */
  readonly onHeld?: (held: Held) => void;
  readonly onDeadLetter?: (letter: DeadLetter) => void;
  readonly onMalformed?: (letter: DeadLetter) => void;
  readonly onError?: (description: string) => void;
  readonly onBrokerMove?: (move: BrokerMove) => void;
  /** Where the gap lines go (held, skipped after the timeout, late); none by default. */
  readonly log?: Logger;
  readonly meter?: Meter;
}

// The engine's counts with its `rejected` (a library has a `check`: never) as `unknown`: events of a
// type this version does not know. `deadLettered` includes events that came after their turn was skipped.
export type SubscriberCounts = Readonly<Record<Exclude<keyof Counts, "rejected"> | "unknown", number>>;

export const COUNT_NAMES =
  ["processed", "duplicates", "rejected", "malformed", "deadLettered", "held", "gapsSkipped", "gapsFilled"] as const;
export type Counts = Record<(typeof COUNT_NAMES)[number], number>;

// The reference subscriber's public contract: what startSubscriber takes and what it returns.
import type { Meter } from "@opentelemetry/api";
import type { Sql, Tx } from "../shared/db.ts";
import type { MqttProtocol } from "../shared/config.ts";
import type { EventEnvelope } from "../events.ts";
import type { DeadLetter } from "./inbox-sql.ts";

type OutboxEvent = EventEnvelope;

export interface Delivery {
  readonly event: OutboxEvent;
  readonly topic: string;
  /** Already in the inbox: the handler did not run again. */
  readonly duplicate: boolean;
  /** The broker flagged it as a resend (DUP). */
  readonly redelivered: boolean;
}

export interface SubscriberOptions {
  readonly sql: Sql;
  readonly mqttUrl: string;
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
   * abandoned and the event is tried again in a new transaction.
   */
  readonly handler?: (event: OutboxEvent, tx: Tx) => Promise<void> | void;
  /** After the commit, before the PUBACK. */
  readonly onDelivery?: (delivery: Delivery) => void;
  /** A message acknowledged without processing because it is not an event. */
  readonly onRejected?: (topic: string, reason: string) => void;
  /** An event the handler kept failing on, once kept in subscriber_dead_letters, before the PUBACK. */
  readonly onDeadLetter?: (letter: DeadLetter) => void;
  readonly onError?: (description: string) => void;
  /** Where subscriber_events_total and subscriber_dead_letters_total are counted; the global meter by default. */
  readonly meter?: Meter;
}

export interface Subscriber {
  readonly processed: number;
  readonly duplicates: number;
  readonly rejected: number;
  /** Events kept in subscriber_dead_letters by this subscriber. */
  readonly deadLettered: number;
  readonly connected: boolean;
  /** Resolves once subscribed. */
  readonly ready: Promise<void>;
  /** Disconnects, keeping the session: what arrives meanwhile waits at the broker. */
  close(): Promise<void>;
}

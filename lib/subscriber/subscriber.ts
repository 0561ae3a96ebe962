// The reference subscriber: receives the relay's events at least once and processes each
// event id once.
//  - Persistent session (MQTT 5 Clean Start 0 + Session Expiry, stable client id): QoS 1
//    events published while it is offline are kept by the broker and arrive when it returns.
//  - Dedup by inbox: in ONE transaction, `insert into inbox ... on conflict do nothing` and the
//    handler's own writes; a conflict means "already processed": the handler is skipped.
//  - The PUBACK goes out only after that transaction committed (mqtt.js sends it when its
//    handleMessage hook calls back), so a crash before the commit gets the event
//    redelivered, and one after it is deduplicated.
//  - A handler that keeps failing: after MAX_HANDLER_ATTEMPTS the event is written to
//    subscriber_dead_letters (with its last error), and only then acknowledged; the stream
//    goes on. Nothing is acknowledged that is neither processed nor kept there.
// Works on MQTT 3.1.1 too (Clean Session 0), for brokers that do not speak 5.
import { metrics, type Meter } from "@opentelemetry/api";
import type { IPublishPacket, MqttClient } from "mqtt";
import { isUnavailable, describeDbError, type Sql, type Tx } from "../shared/db.ts";
import { transaction } from "../shared/tx.ts";
import { recordDeadLetter, recordInbox, type DeadLetter } from "./inbox-sql.ts";
import { connectMqtt } from "../shared/mqtt-connect.ts";
import { describeMqttError } from "../shared/mqtt-errors.ts";
import { parseEnvelope, type EventEnvelope } from "../events.ts";

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
  /** Where subscriber_dead_letters_total is counted; the global meter by default. */
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

// The broker keeps the session (subscription + queued QoS 1 events) this long while the
// subscriber is away: a day covers a deploy or an outage. Mosquitto also caps the queue
// (max_queued_messages, 1000 by default).
// SUBSCRIBER_INBOX_RETENTION_SECONDS must stay above it (a redelivery must still find the inbox row).
const SESSION_EXPIRY_S = 86_400;
// A handler that keeps failing (not the database being away) is given up after this many
// attempts, so one poison event cannot stall the stream; the event then goes to the
// dead-letter table.
const MAX_HANDLER_ATTEMPTS = 5;
// Retry pauses: the database away is retried for as long as it takes, doubling to the cap.
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5000;
const RECONNECT_MS = 1000;
// A graceful DISCONNECT that has not completed in this time is cut.
const CLOSE_TIMEOUT_MS = 2000;


const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

class Closing extends Error {}

export function startSubscriber(options: SubscriberOptions): Subscriber {
  const { sql, consumer } = options;
  let processed = 0;
  let duplicates = 0;
  let rejected = 0;
  let deadLettered = 0;
  let closing = false;
  const deadLetters = (options.meter ?? metrics.getMeter("charges")).createCounter("subscriber_dead_letters_total", {
    description: "Events the reference subscriber gave up on after its retry budget, kept in subscriber_dead_letters",
  });
  let current: Promise<void> = Promise.resolve();

  /** The transaction, retried; resolves to "was a duplicate". */
  async function processEvent(event: OutboxEvent): Promise<boolean> {
    let pause = RETRY_MIN_MS;
    // Only the handler's own failures spend its budget, not the database being away.
    let failures = 0;
    for (let attempt = 1; ; attempt += 1) {
      if (closing) throw new Closing();
      try {
        // Postgres may go away mid-transaction: the attempt fails, the retry finds a new connection.
        return await transaction(sql, async (tx) => {
          const fresh = await recordInbox(tx, event.id, consumer);
          if (fresh) await options.handler?.(event, tx);
          return !fresh;
        });
      } catch (error) {
        if (!isUnavailable(error) && ++failures >= MAX_HANDLER_ATTEMPTS) throw error;
        options.onError?.(`event ${event.id}: attempt ${attempt} failed: ${describeDbError(error)}`);
        await sleep(pause);
        pause = Math.min(RETRY_MAX_MS, pause * 2);
      }
    }
  }

  /** Writes the dead letter, retried until it is written (or the subscriber closes): never acknowledged unwritten. */
  async function keepDeadLetter(letter: DeadLetter): Promise<void> {
    let pause = RETRY_MIN_MS;
    for (;;) {
      if (closing) throw new Closing();
      try {
        return await recordDeadLetter(sql, letter);
      } catch (error) {
        options.onError?.(`event ${letter.eventId}: dead letter not written yet: ${describeDbError(error)}`);
        await sleep(pause);
        pause = Math.min(RETRY_MAX_MS, pause * 2);
      }
    }
  }

  async function giveUp(letter: DeadLetter, ack: () => void): Promise<void> {
    await keepDeadLetter(letter);
    deadLettered += 1;
    deadLetters.add(1, { consumer });
    options.onError?.(`event ${letter.eventId}: handler failed ${letter.attempts} times, kept in subscriber_dead_letters: ${letter.error}`);
    try {
      options.onDeadLetter?.(letter);
    } finally {
      ack();
    }
  }

  // Acknowledged (the broker drops it) without processing: it would fail the same way again.
  function reject(topic: string, reason: string, ack: () => void): void {
    rejected += 1;
    options.onRejected?.(topic, reason);
    ack();
  }

  // mqtt.js calls handleMessage for each received PUBLISH and sends the PUBACK when `ack` is
  // called; it handles one received packet at a time, so events are processed in arrival order.
  const onMessage = (packet: IPublishPacket, ack: () => void): void => {
    const topic = packet.topic;
    if (packet.qos === 0) return ack(); // nothing to acknowledge; the relay never sends QoS 0
    const event = parseEnvelope(packet.payload);
    if (!event) return reject(topic, "not an outbox event envelope", ack);
    current = processEvent(event).then(
      (duplicate) => {
        processed += 1;
        if (duplicate) duplicates += 1;
        try {
          options.onDelivery?.({ event, topic, duplicate, redelivered: packet.dup === true });
        } finally {
          ack();
        }
      },
      (error: unknown) => {
        // Closing: no PUBACK, the broker redelivers it to the next session.
        if (error instanceof Closing) return;
        const payload = typeof packet.payload === "string" ? packet.payload : Buffer.from(packet.payload).toString("utf8");
        const letter = { eventId: event.id, consumer, topic, payload, error: describeDbError(error), attempts: MAX_HANDLER_ATTEMPTS };
        return giveUp(letter, ack);
      },
    ).catch((error: unknown) => {
      if (!(error instanceof Closing)) options.onError?.(`onDelivery or onDeadLetter threw: ${String(error)}`);
    });
  };

  const client: MqttClient = connectMqtt(options.mqttUrl, {
    clientId: options.clientId ?? consumer,
    clean: false,
    properties: { sessionExpiryInterval: options.sessionExpirySeconds ?? SESSION_EXPIRY_S },
    reconnectPeriod: RECONNECT_MS,
    onError: (error) => options.onError?.(describeMqttError(error)),
  });
  client.handleMessage = (packet, callback) => onMessage(packet, () => callback());

  const ready = new Promise<void>((resolve) => {
    const subscribe = (): void => {
      // A resumed session still holds the subscription; subscribing again is harmless and
      // covers a session the broker has expired meanwhile.
      client.subscribe(options.topic, { qos: 1 }, (error) => {
        if (error) {
          options.onError?.(`subscribe failed: ${describeMqttError(error)}`);
          return;
        }
        client.off("connect", subscribe);
        resolve();
      });
    };
    client.on("connect", subscribe);
  });

  return {
    get processed() {
      return processed;
    },
    get duplicates() {
      return duplicates;
    },
    get rejected() {
      return rejected;
    },
    get deadLettered() {
      return deadLettered;
    },
    get connected() {
      return client.connected;
    },
    ready,
    async close() {
      closing = true;
      // Let the event in hand commit and be acknowledged (a retry in progress gives up).
      await current;
      const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
      await client.endAsync().catch(() => {});
      clearTimeout(timer);
    },
  };
}

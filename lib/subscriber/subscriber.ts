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
//
// The pieces: session.ts (MQTT connection and subscription), receive.ts (one message, arrival to
// PUBACK), process.ts (the inbox transaction), dead-letter.ts, retry.ts (back-off), counts.ts.
import { Receiver } from "./receive.ts";
import { closeSession, openSession } from "./session.ts";
import type { Subscriber, SubscriberOptions } from "./types.ts";

export type { Delivery, Subscriber, SubscriberOptions } from "./types.ts";

export function startSubscriber(options: SubscriberOptions): Subscriber {
  const receiver = new Receiver(options);
  const { counts } = receiver;
  const { client, ready } = openSession(options, (packet, ack) => receiver.receive(packet, ack));
  return {
    get processed() {
      return counts.processed;
    },
    get duplicates() {
      return counts.duplicates;
    },
    get rejected() {
      return counts.rejected;
    },
    get deadLettered() {
      return counts.deadLettered;
    },
    get connected() {
      return client.connected;
    },
    ready,
    async close() {
      // Let the event in hand commit and be acknowledged (a retry in progress gives up).
      await receiver.drain();
      await closeSession(client);
    },
  };
}

// The reference subscriber: receives the relay's events at least once and processes each
// event id once.
//  - Persistent session (MQTT 5 Clean Start 0 + Session Expiry, stable client id): QoS 1
//    events published while it is offline are kept by the broker and arrive when it returns.
//  - Dedup by inbox: in ONE transaction, `insert into inbox ... on conflict do nothing` and the
//    handler's own writes; a conflict means "already processed": the handler is skipped.
//  - The PUBACK goes out only after that transaction committed (mqtt.js sends it when its
//    handleMessage hook calls back), so a crash before the commit gets the event
//    redelivered, and one after it is deduplicated.
//  - Per-aggregate order: an event with a sequence is processed only in its aggregate's turn
//    (the one after the aggregate's last processed sequence, kept in subscriber_sequences
//    under a row lock that members of a share group take in turn). One that comes ahead of
//    its turn is kept in subscriber_held_events, acknowledged, and processed when its
//    predecessor has been, or after the gap timeout if the predecessor never comes. Given the
//    API (options.api), a gap that lasted SUBSCRIBER_GAP_FILL_AFTER_MS is filled from its
//    GET /charges/:id/events first, and only a gap the API cannot fill is skipped.
//  - A handler that keeps failing: after MAX_HANDLER_ATTEMPTS the event is written to
//    subscriber_dead_letters (with its last error), and only then acknowledged; the stream
//    goes on. Nothing is acknowledged that is neither processed, held nor kept there.
// Works on MQTT 3.1.1 too (Clean Session 0), for brokers that do not speak 5.
//
// The pieces: session.ts (MQTT connection and subscription), receive.ts (one message, arrival to
// PUBACK), process.ts (the inbox transaction, in turn), release.ts (held events, in order),
// gap-sweep.ts (held events nothing else releases), gap-fill.ts and events-api.ts (a gap filled
// from the API), dead-letter.ts, retry.ts (back-off),
// report.ts and counts.ts (what is told and counted). The library's surface on top of it:
// index.ts (createSubscriber), typed-events.ts (the check on receipt), migrate.ts (its tables).
import { DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } from "../platform/config.ts";
import { GapFiller } from "./gap-fill.ts";
import { startGapSweep } from "./gap-sweep.ts";
import { Receiver } from "./receive.ts";
import { closeSession, openSession } from "./session.ts";
import type { Subscriber, SubscriberOptions } from "./types.ts";

export type { Delivery, GapFillApi, Held, Subscriber, SubscriberOptions } from "./types.ts";

export function startSubscriber(options: SubscriberOptions): Subscriber {
  const receiver = new Receiver(options);
  const { counts } = receiver.report;
  const { client, brokers, ready } = openSession(options, (packet, ack) => receiver.receive(packet, ack));
  const timeoutMs = options.gapTimeoutMs ?? DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS;
  const filler = options.api && new GapFiller(receiver.processing, receiver.releaser, receiver.report, options.api, timeoutMs);
  const sweep = startGapSweep({
    sql: options.sql,
    consumer: options.consumer,
    timeoutMs,
    releaser: receiver.releaser,
    counts,
    filler,
    onError: options.onError,
  });
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
    get malformed() {
      return counts.malformed;
    },
    get deadLettered() {
      return counts.deadLettered;
    },
    get held() {
      return counts.held;
    },
    get gapsSkipped() {
      return counts.gapsSkipped;
    },
    get gapsFilled() {
      return counts.gapsFilled;
    },
    get connected() {
      return client.connected;
    },
    get broker() {
      return brokers.inUse;
    },
    ready,
    async close() {
      // Let the event in hand commit and be acknowledged, and the sweep's release in hand
      // finish (a retry in progress gives up).
      await Promise.all([receiver.drain(), sweep.stop()]);
      counts.close();
      await closeSession(client);
    },
  };
}

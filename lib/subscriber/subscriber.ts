// The reference subscriber: receives the relay's events at least once, processes each event id
// once. The inbox row and the handler's writes commit in ONE transaction and the PUBACK goes out
// only after it, so a crash before the commit gets a redelivery and one after it is deduplicated.
// Events are processed in their aggregate's turn (subscriber_sequences, locked); one ahead is held,
// acknowledged, and processed after its predecessor, or once the gap is filled from the API or
// times out. A handler failing MAX_HANDLER_ATTEMPTS times makes a dead letter; nothing is
// acknowledged that is neither processed, held nor kept. Pieces: session.ts, receive.ts,
// process.ts, release.ts, gap-sweep.ts, gap-fill.ts, events-api.ts, dead-letter.ts; index.ts is
// the library's surface.
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

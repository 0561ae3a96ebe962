// The subscriber's engine under createSubscriber: the session, its PUBLISHes, and the gap sweep, which
// fills gaps from the API, then releases held events whose turn came (after a crash) or whose gap timed out.
import { DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } from "../platform/config.ts";
import { describeDbError } from "../platform/db.ts";
import { every } from "../platform/every.ts";
import { GapFiller } from "./gap-fill.ts";
import { Receiver } from "./receive.ts";
import { withCounts } from "./report.ts";
import { Closing } from "./process.ts";
import { countHeld, dueAggregates } from "./sequence-sql.ts";
import { closeSession, openSession } from "./session.ts";
import { COUNT_NAMES, type SubscriberOptions } from "./types.ts";

export type { Delivery, GapFillApi, Held, SubscriberOptions } from "./types.ts";
export type Subscriber = ReturnType<typeof startSubscriber>;

const GAP_SWEEP_INTERVAL_MS = 1000;
// After failed runs the pause doubles up to this: an outage is not logged every second.
const GAP_SWEEP_MAX_PAUSE_MS = 30_000;
const GAP_SWEEP_BATCH = 100;

export function startSubscriber(options: SubscriberOptions) {
  const receiver = new Receiver(options);
  const { report, releaser } = receiver;
  const { client, brokers, ready } = openSession(options, (packet, ack) => receiver.receive(packet, ack));
  const { sql, consumer, gapTimeoutMs: timeoutMs = DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS } = options;
  const filler = options.api && new GapFiller(receiver.processing, releaser, report, options.api, timeoutMs);
  let failures = 0;
  const pauseMs = (): number => Math.min(GAP_SWEEP_MAX_PAUSE_MS, GAP_SWEEP_INTERVAL_MS * 2 ** failures);
  const sweep = every({
    delayMs: pauseMs,
    runAtOnce: true,
    job: async (signal) => {
      // Filled first: a gap the API fills is never skipped by the release below.
      await filler?.run(signal);
      for (const place of await dueAggregates(sql, consumer, timeoutMs, GAP_SWEEP_BATCH)) {
        if (signal.aborted) return;
        await releaser.release(place);
      }
      report.heldNow = await countHeld(sql, consumer);
      failures = 0;
    },
    onError: (error) => {
      if (error instanceof Closing) return;
      failures += 1;
      options.onError?.(`gap sweep failed (next in ${pauseMs()} ms): ${describeDbError(error)}`);
    },
  });
  const subscriber = {
    get connected() {
      return client.connected;
    },
    get broker() {
      return brokers.inUse;
    },
    ready,
    /** Keeps the session: what arrives meanwhile waits at the broker. */
    async close(): Promise<void> {
      // The event in hand commits and is acknowledged; a retry in progress gives up.
      await Promise.all([receiver.drain(), sweep.stop()]);
      report.close();
      await closeSession(client);
    },
  };
  return withCounts(subscriber, COUNT_NAMES, (name) => report.counts[name]);
}

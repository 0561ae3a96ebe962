// Runs the reference subscriber (examples/subscriber.ts) and reads its JSON lines: which
// event ids arrived, how often, and which the inbox dropped as duplicates.
import { spawnScript, type Child } from "../../testkit/processes.ts";
import { waitUntil } from "../../testkit/wait.ts";
import { chaosChild, chaosServices } from "./harness.ts";

// Bun, the database and the broker subscription: seconds on a loaded machine.
const READY_TIMEOUT_MS = 20_000;
// It finishes the event in hand and prints its "stopped" line on SIGTERM.
const STOP_TIMEOUT_MS = 4000;

export interface SubscriberView {
  readonly child: Child;
  readonly consumer: string;
  /** Event id → number of deliveries seen (processed and duplicate). */
  readonly arrivals: Map<string, number>;
  /** Deliveries the inbox recognised as already processed. */
  readonly droppedByInbox: () => number;
  /** Event ids whose handler ran more than once (a delivery not recognised as a duplicate, twice). */
  readonly processedTwice: () => string[];
  readonly deliveries: () => number;
  readonly rejected: () => number;
  /** Aggregate id → the sequences of its events in the order they were processed (duplicates left out). */
  readonly processedOrder: Map<string, number[]>;
  /** Events processed past a missing predecessor (after the gap timeout). */
  readonly gapsSkipped: () => number;
  /** The broker its `ready` line named (masked). */
  readonly broker: () => string | undefined;
  /** Its moves to the next broker of MQTT_URL, in order. */
  readonly moves: { readonly from: string; readonly to: string }[];
  stop(): Promise<void>;
}

interface Line {
  event?: string;
  id?: string;
  duplicate?: boolean;
  aggregateId?: string;
  sequence?: number;
  gapSkipped?: boolean;
  broker?: string;
  from?: string;
  to?: string;
}

export async function startSubscriber(dbUrl: string, prefix: string, consumer: string, mqttUrl?: string): Promise<SubscriberView> {
  const brokers = mqttUrl ?? (await chaosServices()).mqttUrl;
  const arrivals = new Map<string, number>();
  // Event id → deliveries the subscriber processed (not dropped by its inbox). A commit whose
  // answer was lost with the connection is processed once and then seen as a duplicate only.
  const processed = new Map<string, number>();
  let dropped = 0;
  let deliveries = 0;
  let rejected = 0;
  let ready = false;
  let broker: string | undefined;
  let gapsSkipped = 0;
  const processedOrder = new Map<string, number[]>();
  const moves: { from: string; to: string }[] = [];
  const onLine = (text: string): void => {
    if (!text.startsWith("{")) return;
    let line: Line;
    try {
      line = JSON.parse(text) as Line;
    } catch {
      return;
    }
    if (line.event === "ready") {
      ready = true;
      broker = line.broker;
    } else if (line.event === "rejected") rejected += 1;
    else if (line.event === "broker-moved") moves.push({ from: line.from ?? "", to: line.to ?? "" });
    else if (line.event === "received" && typeof line.id === "string") {
      deliveries += 1;
      arrivals.set(line.id, (arrivals.get(line.id) ?? 0) + 1);
      if (line.duplicate) dropped += 1;
      else {
        processed.set(line.id, (processed.get(line.id) ?? 0) + 1);
        if (line.gapSkipped) gapsSkipped += 1;
        if (line.aggregateId !== undefined && line.sequence !== undefined) {
          processedOrder.set(line.aggregateId, [...(processedOrder.get(line.aggregateId) ?? []), line.sequence]);
        }
      }
    }
  };
  const env = { DATABASE_URL: dbUrl, MQTT_URL: brokers, MQTT_TOPIC_PREFIX: prefix, SUBSCRIBER_CONSUMER: consumer };
  const child = spawnScript("examples/subscriber.ts", { ...chaosChild("subscriber", env), stdout: onLine });
  await waitUntil(
    () => {
      if (child.exited) throw new Error(`subscriber exited with ${child.exitCode}`);
      return ready;
    },
    READY_TIMEOUT_MS,
    "the subscriber to subscribe",
  );
  return {
    child,
    consumer,
    arrivals,
    droppedByInbox: () => dropped,
    processedTwice: () => [...processed].filter(([, n]) => n > 1).map(([id]) => id),
    deliveries: () => deliveries,
    rejected: () => rejected,
    processedOrder,
    gapsSkipped: () => gapsSkipped,
    broker: () => broker,
    moves,
    async stop() {
      await child.stop(STOP_TIMEOUT_MS);
    },
  };
}

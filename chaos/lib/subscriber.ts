// Runs the reference subscriber (examples/reference-subscriber.ts) and reads its JSON lines: which
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
  /** Event id → deliveries processed (not dropped by the inbox). */
  readonly processed: Map<string, number>;
  readonly deliveries: () => number;
  readonly rejected: () => number;
  /** Aggregate id → the sequences of its events in the order they were processed (duplicates left out). */
  readonly processedOrder: Map<string, number[]>;
  /** Events processed past a missing predecessor (after the gap timeout). */
  readonly gapsSkipped: () => number;
  /** Events read from the API to fill a gap and processed (not dropped as duplicates). */
  readonly filled: () => number;
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
  filled?: boolean;
  broker?: string;
  from?: string;
  to?: string;
}

/**
 * examples/reference-subscriber.ts on the scenario's database and topics; `env` adds variables
 * (SUBSCRIBER_API_URL, …). Given the view of the process it follows (`continuing`, stopped),
 * the new view counts on from it: what both processes received, as one subscriber.
 */
export async function startSubscriber(dbUrl: string, prefix: string, consumer: string, mqttUrl?: string, extraEnv: Record<string, string> = {}, continuing?: SubscriberView): Promise<SubscriberView> {
  const brokers = mqttUrl ?? (await chaosServices()).mqttUrl;
  const arrivals = new Map(continuing?.arrivals);
  // Event id → deliveries the subscriber processed (not dropped by its inbox). A commit whose
  // answer was lost with the connection is processed once and then seen as a duplicate only.
  const processed = new Map(continuing?.processed);
  let dropped = continuing?.droppedByInbox() ?? 0;
  let deliveries = continuing?.deliveries() ?? 0;
  let rejected = continuing?.rejected() ?? 0;
  let ready = false;
  let broker: string | undefined;
  let gapsSkipped = continuing?.gapsSkipped() ?? 0;
  let filled = continuing?.filled() ?? 0;
  const processedOrder = new Map([...(continuing?.processedOrder ?? [])].map(([id, order]) => [id, [...order]]));
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
        if (line.filled) filled += 1;
        if (line.aggregateId !== undefined && line.sequence !== undefined) {
          processedOrder.set(line.aggregateId, [...(processedOrder.get(line.aggregateId) ?? []), line.sequence]);
        }
      }
    }
  };
  const env = { DATABASE_URL: dbUrl, MQTT_URL: brokers, MQTT_TOPIC_PREFIX: prefix, SUBSCRIBER_CONSUMER: consumer, ...extraEnv };
  const child = spawnScript("examples/reference-subscriber.ts", { ...chaosChild("subscriber", env), stdout: onLine });
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
    processed,
    deliveries: () => deliveries,
    rejected: () => rejected,
    processedOrder,
    gapsSkipped: () => gapsSkipped,
    filled: () => filled,
    broker: () => broker,
    moves,
    async stop() {
      await child.stop(STOP_TIMEOUT_MS);
    },
  };
}

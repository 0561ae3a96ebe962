// Runs the reference subscriber (examples/subscriber.ts) and reads its JSON lines: which
// event ids arrived, how often, and which the inbox dropped as duplicates.
import { MQTT_URL, spawnBun, until, type Child } from "./harness.ts";

export interface SubscriberView {
  readonly child: Child;
  readonly consumer: string;
  /** Event id → number of deliveries seen (processed and duplicate). */
  readonly arrivals: Map<string, number>;
  /** Deliveries the inbox recognised as already processed. */
  readonly droppedByInbox: () => number;
  readonly deliveries: () => number;
  readonly rejected: () => number;
  stop(): Promise<void>;
}

interface Line {
  event?: string;
  id?: string;
  duplicate?: boolean;
}

export async function startSubscriber(dbUrl: string, prefix: string, consumer: string, mqttUrl = MQTT_URL): Promise<SubscriberView> {
  const child = spawnBun("subscriber", "examples/subscriber.ts", {
    DATABASE_URL: dbUrl,
    MQTT_URL: mqttUrl,
    MQTT_TOPIC_PREFIX: prefix,
    SUBSCRIBER_CONSUMER: consumer,
  }, "pipe");
  const arrivals = new Map<string, number>();
  let dropped = 0;
  let deliveries = 0;
  let rejected = 0;
  let ready = false;
  const stdout = child.proc.stdout;
  if (!(stdout instanceof ReadableStream)) throw new Error("subscriber stdout is not a pipe");
  const reading = (async () => {
    const decoder = new TextDecoder();
    let buffer = "";
    const reader = stdout.getReader();
    for (;;) {
      const { value: chunk, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const text = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!text.startsWith("{")) continue;
        let line: Line;
        try {
          line = JSON.parse(text) as Line;
        } catch {
          continue;
        }
        if (line.event === "ready") ready = true;
        else if (line.event === "rejected") rejected += 1;
        else if (line.event === "received" && typeof line.id === "string") {
          deliveries += 1;
          arrivals.set(line.id, (arrivals.get(line.id) ?? 0) + 1);
          if (line.duplicate) dropped += 1;
        }
      }
    }
  })();
  await until("the subscriber to subscribe", 20_000, () => {
    if (child.exited) throw new Error(`subscriber exited with ${child.proc.exitCode}`);
    return ready;
  });
  return {
    child,
    consumer,
    arrivals,
    droppedByInbox: () => dropped,
    deliveries: () => deliveries,
    rejected: () => rejected,
    async stop() {
      child.kill("SIGTERM");
      await Promise.race([child.proc.exited, new Promise((r) => setTimeout(r, 4000))]);
      child.kill("SIGKILL");
      await Promise.race([reading, new Promise((r) => setTimeout(r, 1000))]);
    },
  };
}

// The reference subscriber (examples/subscriber.ts) as a real process, for tests that hold it
// to a fault: started, subscribed, and its JSON lines kept as it prints them.
import { spawnScript, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// Bun, the schema and the broker subscription, on a loaded machine.
const READY_TIMEOUT_MS = 20_000;

/** One line the subscriber printed (`ready`, `received`, ...). */
export interface SubscriberLine {
  readonly event?: string;
  readonly id?: string;
  readonly duplicate?: boolean;
}

export interface SubscriberOptions {
  readonly databaseUrl: string;
  readonly mqttUrl: string;
  readonly prefix: string;
  readonly consumer: string;
  /** Added to (or overriding) its environment: DATABASE_POOLER, LOG_LEVEL, ... */
  readonly env?: Record<string, string>;
}

/** examples/subscriber.ts, once it has subscribed; the caller stops it. Fails at once if it exits first. */
export async function spawnSubscriber(options: SubscriberOptions): Promise<{ child: Child; lines: SubscriberLine[] }> {
  const lines: SubscriberLine[] = [];
  const child = spawnScript("examples/subscriber.ts", {
    name: "subscriber",
    env: {
      DATABASE_URL: options.databaseUrl,
      MQTT_URL: options.mqttUrl,
      MQTT_TOPIC_PREFIX: options.prefix,
      SUBSCRIBER_CONSUMER: options.consumer,
      LOG_LEVEL: "warn",
      ...options.env,
    },
    stdout: (text) => {
      if (text.startsWith("{")) lines.push(JSON.parse(text) as SubscriberLine);
    },
  });
  try {
    await waitUntil(() => {
      if (child.exited) throw new Error(`the subscriber exited with ${child.exitCode}: ${child.output()}`);
      return lines.some((l) => l.event === "ready");
    }, READY_TIMEOUT_MS, "the subscriber to subscribe");
  } catch (error) {
    await child.stop();
    throw error;
  }
  return { child, lines };
}

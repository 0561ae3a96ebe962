// The reference subscriber (examples/reference-subscriber.ts) as a real process, for tests that hold it
// to a fault: started, subscribed, and its JSON lines kept as it prints them. And events as
// a relay would publish them, crafted one by one (any aggregate, any sequence, any order), for
// tests of the subscriber's order.
import { v7 as uuidV7 } from "uuid";
import { buildEnvelope, CHARGE_CREATED, CHARGE_REFUNDED, topicOf } from "../lib/charges/events.ts";
import { spawnScript, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// Bun, the schema and the broker subscription, on a loaded machine.
const READY_TIMEOUT_MS = 20_000;

/** One line the subscriber printed (`ready`, `received`, `held`, ...). */
export interface SubscriberLine {
  readonly event?: string;
  readonly id?: string;
  readonly aggregateId?: string;
  readonly sequence?: number;
  readonly expected?: number;
  readonly duplicate?: boolean;
  readonly held?: boolean;
  readonly gapSkipped?: boolean;
  /** `ready`: the broker in use, masked. */
  readonly broker?: string;
  /** `broker-moved`: the broker lost and the next one, masked. */
  readonly from?: string;
  readonly to?: string;
}

export interface SubscriberOptions {
  readonly databaseUrl: string;
  readonly mqttUrl: string;
  readonly prefix: string;
  readonly consumer: string;
  /** More of its environment (SUBSCRIBER_SHARE_GROUP, SUBSCRIBER_CLIENT_ID, SUBSCRIBER_GAP_TIMEOUT_MS, DATABASE_POOLER, LOG_LEVEL, ...). */
  readonly env?: Record<string, string>;
  readonly name?: string;
}

/** examples/reference-subscriber.ts, once it has subscribed; the caller stops it. Fails at once if it exits first. */
export async function spawnSubscriber(options: SubscriberOptions): Promise<{ child: Child; lines: SubscriberLine[] }> {
  const lines: SubscriberLine[] = [];
  const child = spawnScript("examples/reference-subscriber.ts", {
    name: options.name ?? "subscriber",
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

/** One event of a charge as the relay publishes it: where, and the payload. */
export interface CraftedEvent {
  readonly id: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly topic: string;
  readonly payload: string;
}

/** The charge's event of `sequence`: its ChargeCreated at 1, a ChargeRefunded after. */
export function chargeEvent(prefix: string, aggregateId: string, sequence: number): CraftedEvent {
  const id = uuidV7();
  const type = sequence === 1 ? CHARGE_CREATED : CHARGE_REFUNDED;
  const data = sequence === 1 ? { chargeId: aggregateId, amountCents: 1000 } : { chargeId: aggregateId, refundId: crypto.randomUUID(), amountCents: 1, refundedCents: sequence - 1 };
  const payload = buildEnvelope({ id, type, aggregateId, tenantId: "tenant-a", createdAt: new Date().toISOString(), sequence, data });
  return { id, aggregateId, sequence, topic: topicOf(prefix, type), payload };
}

/** A charge's events 1..count, in sequence order. */
export function chargeEvents(prefix: string, count: number, aggregateId: string = crypto.randomUUID()): CraftedEvent[] {
  return Array.from({ length: count }, (_, i) => chargeEvent(prefix, aggregateId, i + 1));
}

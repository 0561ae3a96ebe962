// `bun lib/dev/print-subscriber.ts`: prints each ChargeCreated event the relay publishes,
// one readable line each. Used by `bun run dev`. MQTT 3.1.1 so it works on any broker,
// including the in-process aedes (no MQTT 5); the payload carries everything it prints.
import mqtt from "mqtt";

const url = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
const topic = `${process.env.MQTT_TOPIC_PREFIX ?? ""}charges/#`;
// Delivery is at least once: remember recent ids to mark redeliveries instead of hiding them.
const REMEMBERED_IDS = 10_000;

interface Event {
  readonly id?: string;
  readonly type?: string;
  readonly createdAt?: string;
  readonly data?: { readonly chargeId?: string; readonly amountCents?: number };
}

const seen = new Set<string>();
const client = mqtt.connect(url, { protocolVersion: 4, clean: true, reconnectPeriod: 1000, log: () => {} });
client.on("connect", () => {
  client.subscribe(topic, { qos: 1 }, (error) => {
    console.log(error ? `cannot subscribe to ${topic}: ${error.message}` : `listening on ${topic} at ${url}`);
  });
});
client.on("error", (error) => console.log(`broker: ${error.message}`));
client.on("message", (received, payload) => console.log(describe(received, payload.toString("utf8"))));

function describe(received: string, text: string): string {
  let event: Event;
  try {
    event = JSON.parse(text) as Event;
  } catch {
    return `${received}: (not JSON) ${text.slice(0, 200)}`;
  }
  const repeat = event.id && seen.has(event.id) ? " (redelivery)" : "";
  if (event.id) remember(event.id);
  const lagMs = event.createdAt ? Date.now() - Date.parse(event.createdAt) : Number.NaN;
  const lag = Number.isFinite(lagMs) ? `, ${lagMs} ms after commit` : "";
  return `${event.type ?? received} charge ${event.data?.chargeId} amountCents=${event.data?.amountCents} (event ${event.id}${lag})${repeat}`;
}

function remember(id: string): void {
  seen.add(id);
  if (seen.size > REMEMBERED_IDS) seen.delete(seen.values().next().value!);
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => client.end(false, {}, () => process.exit(0)));
}

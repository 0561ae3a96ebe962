// A consumer on charges-outbox/subscriber: keeps each charge's amount and refunded total in a
// table of its own, one JSON line per event on stdout. `bun run dev` runs it; copy it as the
// start of yours. Environment: DATABASE_URL (the subscriber's own database), MQTT_URL (one
// broker or a comma-separated list), MQTT_TOPIC_PREFIX, SUBSCRIBER_CONSUMER. SIGTERM or
// SIGINT lets the event in hand finish and be acknowledged, then exits.
import postgres from "postgres";
import { createSubscriber, migrateSubscriber, type ChargeEvent, type SubscriberTx } from "../lib/subscriber/index.ts";

const databaseUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
await migrateSubscriber(sql);
await sql`create table if not exists example_charges (
  charge_id uuid primary key, amount_cents integer not null, refunded_cents integer not null default 0, status text not null)`;

// Runs in the inbox's transaction: these writes commit once per event, whatever the redeliveries.
async function handle(event: ChargeEvent, tx: SubscriberTx): Promise<void> {
  switch (event.type) {
    case "ChargeCreated":
      await tx`insert into example_charges (charge_id, amount_cents, status)
               values (${event.data.chargeId}, ${event.data.amountCents}, ${event.data.status ?? "succeeded"})`;
      return;
    case "ChargeFailed":
      await tx`insert into example_charges (charge_id, amount_cents, status) values (${event.data.chargeId}, ${event.data.amountCents}, 'failed')`;
      return;
    case "ChargeRefunded":
      await tx`update example_charges set refunded_cents = ${event.data.refundedCents} where charge_id = ${event.data.chargeId}`;
      return;
    case "ChargeCaptured":
      await tx`update example_charges set amount_cents = ${event.data.capturedCents}, status = 'succeeded' where charge_id = ${event.data.chargeId}`;
      return;
    case "ChargeCanceled":
      await tx`update example_charges set status = 'canceled' where charge_id = ${event.data.chargeId}`;
      return;
  }
}

const print = (line: Record<string, unknown>): void => console.log(JSON.stringify(line));
const subscriber = createSubscriber({
  mqttUrl: (process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883").split(",").map((url) => url.trim()),
  sql,
  consumer: process.env.SUBSCRIBER_CONSUMER?.trim() || "example-subscriber",
  topicPrefix: process.env.MQTT_TOPIC_PREFIX ?? "",
  handle,
  onDelivery: ({ event, duplicate }) => print({ event: "received", id: event.id, type: event.type, aggregateId: event.aggregateId, sequence: event.sequence, duplicate }),
  onDeadLetter: (letter) => print({ event: "dead-lettered", id: letter.eventId, error: letter.error }),
  onMalformed: (letter) => print({ event: "malformed", topic: letter.topic, error: letter.error }),
  onError: (description) => console.error(`subscriber: ${description}`),
});
await subscriber.ready;
print({ event: "ready", broker: subscriber.broker });

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    void (async () => {
      await subscriber.stop();
      await sql.end({ timeout: 5 });
      print({ event: "stopped", ...subscriber.counts });
      process.exit(0);
    })();
  });
}

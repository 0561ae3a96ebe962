// The reference subscriber (examples/reference-subscriber.ts, a real process) when its database server
// refuses every connection for a while (53300, as at max_connections) after its connections
// were cut: the events published meanwhile must wait in the broker's session and each be
// processed once when the server accepts again, without the process dying.
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { buildEnvelope, CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { createRoleDatabase } from "../testkit/database.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { spawnSubscriber } from "../testkit/subscriber.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

// A subscriber start, a refusal and the retries' pauses (doubling up to 5 s) on a loaded machine.
setDefaultTimeout(90_000);
const RECOVERY_TIMEOUT_MS = 30_000;

const { mqttUrl, adminDatabaseUrl } = await services();
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

test("the server refuses the subscriber's connections for a while (53300): it stays up and processes each event of the outage once", async () => {
  const own = await createRoleDatabase(adminDatabaseUrl, "subscriber_refused");
  cleanups.push(() => own.drop());
  const prefix = `test/${crypto.randomUUID()}/`;
  const consumer = `test-refused-${crypto.randomUUID().slice(0, 8)}`;
  const { child, lines } = await spawnSubscriber({ databaseUrl: own.url, mqttUrl, prefix, consumer });
  cleanups.push(() => child.stop());
  const alive = (): void => {
    if (child.exited) throw new Error(`the subscriber exited with ${child.exitCode}: ${child.output()}`);
  };
  const received = (id: string) => lines.filter((l) => l.event === "received" && l.id === id);

  const publisher = await rawClient(mqttUrl);
  cleanups.push(() => publisher.endAsync());
  const publish = async (id: string): Promise<void> => {
    const envelope = buildEnvelope({ id, type: CHARGE_CREATED, aggregateId: crypto.randomUUID(), tenantId: "tenant-a", createdAt: new Date().toISOString(), sequence: 1, data: { amountCents: 100 } });
    await publisher.publishAsync(topicOf(prefix, CHARGE_CREATED), envelope, { qos: 1 });
  };
  const before = crypto.randomUUID();
  await publish(before);
  await waitUntil(() => (alive(), received(before).length === 1), RECOVERY_TIMEOUT_MS, "the event before the refusal");

  await own.refuse();
  const during = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
  for (const id of during) await publish(id);
  // Refused, not merely cut: a retry of the subscriber has met the refusal itself.
  await waitUntil(() => (alive(), /subscriber: .*53300/.test(child.output())), RECOVERY_TIMEOUT_MS, "the subscriber to meet 53300");
  expect(during.flatMap(received)).toEqual([]);
  await own.accept();

  await waitUntil(() => (alive(), during.every((id) => received(id).length > 0)), RECOVERY_TIMEOUT_MS, "every event of the outage");
  for (const id of [before, ...during]) expect(received(id)).toEqual([expect.objectContaining({ duplicate: false })]);
  const rows = await own.sql<{ event_id: string }[]>`select event_id::text from inbox where consumer = ${consumer}`;
  expect(rows.map((r) => r.event_id).sort()).toEqual([before, ...during].sort());
  expect(await child.stop()).toBe(0);
});

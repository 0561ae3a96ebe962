// The relay when the broker or the database goes away: nothing lost, no attempts burnt on
// an absent broker, and a broker's refusal (a real Mosquitto ACL) parks the row.
import { expect, setDefaultTimeout, test } from "bun:test";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { connectBroker, type Broker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount, type Relay } from "../lib/relay/loop.ts";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { notifyOutbox } from "../lib/platform/wakeup.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { collect } from "../testkit/mqtt.ts";
import { brokerDir, mosquittoInstalled, privateMosquitto, unboundedBroker } from "../testkit/mosquitto.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { relayTestContext } from "../testkit/relay-context.ts";
import { services } from "../testkit/services.ts";
import { createRoleDatabase } from "../testkit/database.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const ctx = await relayTestContext("relay_outages");
const { db, mqttUrl, cleanups } = ctx;

function relayOn(url: string, applicationName = "relay-test"): { relay: Relay; broker: Broker; sql: Sql } {
  const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName });
  const broker = connectBroker(url);
  const relay = createRelay({ sql, broker, batchSize: 50, pollMs: 200, topicPrefix: ctx.prefix });
  cleanups.push(() => sql.end({ timeout: 5 }), () => broker.close(), () => relay.stop());
  return { relay, broker, sql };
}

test.skipIf(!mosquittoInstalled())(
  "broker stopped mid-drain and while rows are pending, then started: every row delivered, no attempt burnt",
  async () => {
    // Unlimited queue: the subscriber is offline for a moment during the restart.
    const broker = await privateMosquitto("max_queued_messages 0");
    cleanups.push(() => broker.stop());
    const collector = await collect(broker.url, ctx.prefix, { clientId: `outage-${crypto.randomUUID().slice(0, 8)}`, persistent: true });
    cleanups.push(() => collector.close());
    const first = await insertPending(db.sql, 5000);
    const { relay } = relayOn(broker.url);
    void relay.run();

    await waitUntil(async () => (await countWhere(db.sql, "published")) > 0, 10_000, "the drain to start");
    await broker.stop(); // mid-drain
    await waitUntil(() => relay.state === "waiting-for-broker", 5000, "the relay to wait for the broker");
    const second = await insertPending(db.sql, 200);
    // A wake-up while the broker is away must not make it claim (and burn attempts). A
    // publish never resets attempts, so `attempted` = 0 once everything is delivered below
    // proves that no attempt was burnt during the outage.
    await notifyOutbox(db.sql);
    expect(relay.state).toBe("waiting-for-broker");
    expect(await countWhere(db.sql, "pending")).toBeGreaterThanOrEqual(second.length);

    await broker.start();
    const all = new Set([...first, ...second].map((r) => r.id));
    await waitUntil(() => new Set(collector.ids()).size >= all.size, 20_000, "every row at the subscriber");
    expect(new Set(collector.ids())).toEqual(all);
    await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked");
    expect(await countWhere(db.sql, "attempted")).toBe(0);
  },
);

test.skipIf(!mosquittoInstalled())("a PUBACK 'not authorized' from a real Mosquitto ACL parks the row, not retried", async () => {
  const dir = brokerDir();
  writeFileSync(join(dir, "acl"), "topic read #\n", { mode: 0o644 }); // anonymous clients may subscribe, never publish
  const broker = await privateMosquitto(`acl_file ${join(dir, "acl")}`, dir);
  cleanups.push(() => broker.stop());
  const [row] = await insertPending(db.sql, 1);
  const { relay, broker: connection } = relayOn(broker.url);
  await waitUntil(() => connection.connected, 5000, "broker connection");
  expect(await relay.runOnce()).toBe(0);
  const [state] = await db.sql<{ parked: boolean; attempts: number; last_error: string }[]>`
    select parked_at is not null as parked, attempts, last_error from outbox where id = ${row!.id}`;
  expect(state).toMatchObject({ parked: true, attempts: 1 });
  expect(state!.last_error).toContain("0x87");
});

test("the relay's database connections killed mid-drain: the process survives, reconnects and delivers every row", async () => {
  const broker = await unboundedBroker(mqttUrl);
  cleanups.push(() => broker.stop());
  const collector = await collect(broker.url, ctx.prefix);
  cleanups.push(() => collector.close());
  const rows = await insertPending(db.sql, 5000);
  // A process of its own: postgres.js leaves some rejections of dying connections unhandled,
  // which relay.ts logs instead of crashing on (and which would fail this test file).
  const { child: relay } = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: ctx.prefix, LOG_LEVEL: "error" },
  });
  cleanups.push(async () => relay.kill("SIGKILL"));
  await waitUntil(async () => (await countWhere(db.sql, "published")) > 0, 10_000, "the drain to start");
  const killed = await db.sql`
    select pg_terminate_backend(pid) from pg_stat_activity
    where application_name = 'charges-relay' and datname = current_database()`;
  expect(killed.length).toBeGreaterThan(0);

  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 20_000, "every row marked");
  await waitUntil(() => new Set(collector.ids()).size >= rows.length, 5000, "every row at the subscriber");
  expect(new Set(collector.ids())).toEqual(new Set(rows.map((r) => r.id)));
  expect(relay.exited).toBe(false);
  expect(await relay.stop()).toBe(0);
});

// What a full server looks like to the relay: 53300 on every connect, as at max_connections.
test("the server refuses the relay's connections for a while (53300): it survives and delivers every row once they are accepted", async () => {
  const own = await createRoleDatabase((await services()).adminDatabaseUrl, "relay_refused");
  cleanups.push(() => own.drop());
  const broker = await unboundedBroker(mqttUrl);
  cleanups.push(() => broker.stop());
  const collector = await collect(broker.url, ctx.prefix);
  cleanups.push(() => collector.close());
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: own.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: ctx.prefix, LOG_LEVEL: "error" },
  });
  cleanups.push(async () => relay.child.kill("SIGKILL"));
  const before = await insertPending(own.sql, 2000);
  await waitUntil(async () => (await countWhere(own.sql, "published")) > 0, 10_000, "the drain to start");

  await own.refuse();
  const during = await insertPending(own.sql, 200);
  // Refused, not merely slow: the relay's own probe says the database is away.
  await waitUntil(async () => (await fetch(`${relay.base}/readyz`)).status === 503, 10_000, "the relay to find the database refusing it");
  await own.accept();

  await waitUntil(async () => (await countWhere(own.sql, "pending")) === 0, 20_000, "every row marked");
  const rows = [...before, ...during];
  await waitUntil(() => new Set(collector.ids()).size >= rows.length, 5000, "every row at the subscriber");
  expect(new Set(collector.ids())).toEqual(new Set(rows.map((r) => r.id)));
  expect(relay.child.exited).toBe(false);
  expect(await relay.child.stop()).toBe(0);
});

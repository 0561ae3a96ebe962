// `bun relay.ts` as a process: health and readiness, a clear exit when the database is
// unreachable, and SIGTERM in the middle of a drain.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { collect } from "../testkit/mqtt.ts";
import { unboundedBroker } from "../testkit/mosquitto.ts";
import { runToExit, startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";
import { freePort } from "../dev/ports.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_process");
const { mqttUrl } = await services();
afterAll(() => db.drop());

const relayEnv = (env: Record<string, string>) => ({ DATABASE_URL: db.url, MQTT_URL: mqttUrl, LOG_LEVEL: "warn", ...env });

test("an unreachable database: one clear line on stderr and a non-zero exit", async () => {
  const { code, stderr } = await runToExit(["bun", "relay.ts"], relayEnv({ DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere", RELAY_PORT: "0" }));
  expect(code).not.toBe(0);
  expect(stderr.trim().split("\n")).toHaveLength(1);
  expect(stderr).toContain("DATABASE_URL");
});

test("healthz answers while the broker is away; readyz says which dependency is down", async () => {
  const relay = await startEntrypoint("relay", { env: relayEnv({ MQTT_URL: `mqtt://127.0.0.1:${await freePort()}` }), readyPath: "/healthz" });
  try {
    const ready = await fetch(`${relay.base}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ database: "up", broker: "disconnected" });
  } finally {
    expect(await relay.child.stop()).toBe(0);
  }
});

test("SIGTERM mid-drain: exit 0, and no row both delivered and left unpublished", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const broker = await unboundedBroker(mqttUrl);
  const collector = await collect(broker.url, prefix);
  const rows = await insertPending(db.sql, 30_000);
  const relay = await startEntrypoint("relay", { env: relayEnv({ MQTT_TOPIC_PREFIX: prefix, MQTT_URL: broker.url }) });
  await waitUntil(async () => (await countWhere(db.sql, "published")) >= 1000, 10_000, "the drain under way");
  expect(await relay.child.stop()).toBe(0);
  // Whatever the relay handed the broker before it exited reaches the collector before this.
  await collector.barrier();

  const pending = new Set((await db.sql<{ id: string }[]>`select id from outbox where published_at is null`).map((r) => r.id));
  const delivered = new Set(collector.ids());
  expect(pending.size).toBeGreaterThan(0); // it was stopped mid-drain
  expect(pending.size).toBeLessThan(rows.length);
  expect([...delivered].filter((id) => pending.has(id))).toEqual([]);
  const published = rows.filter((r) => !pending.has(r.id));
  expect(published.every((r) => delivered.has(r.id))).toBe(true);
  expect(await countWhere(db.sql, "attempted")).toBe(0);
  await collector.close();
  await broker.stop();
});

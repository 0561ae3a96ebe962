// `bun relay.ts` as a process: health and readiness, a clear exit when the database is
// unreachable, and SIGTERM in the middle of a drain.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { freePort } from "../dev/ports.ts";
import { collect, countWhere, insertPending, waitUntil } from "../testkit/outbox.ts";
import { freshDatabase, services } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_process");
const { mqttUrl } = await services();
afterAll(() => db.drop());

const root = new URL("..", import.meta.url).pathname;

function spawnRelay(env: Record<string, string>) {
  return Bun.spawn(["bun", "relay.ts"], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: db.url, MQTT_URL: mqttUrl, LOG_LEVEL: "warn", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
}

async function status(url: string): Promise<number> {
  return fetch(url).then(
    (response) => response.status,
    () => 0,
  );
}

test("an unreachable database: one clear line on stderr and a non-zero exit", async () => {
  const child = spawnRelay({ DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere", RELAY_PORT: String(await freePort()) });
  expect(await child.exited).not.toBe(0);
  const stderr = (await new Response(child.stderr).text()).trim();
  expect(stderr.split("\n")).toHaveLength(1);
  expect(stderr).toContain("DATABASE_URL");
});

test("healthz answers while the broker is away; readyz says which dependency is down", async () => {
  const port = await freePort();
  const child = spawnRelay({ RELAY_PORT: String(port), MQTT_URL: `mqtt://127.0.0.1:${await freePort()}` });
  try {
    await waitUntil(async () => (await status(`http://127.0.0.1:${port}/healthz`)) === 200, 10_000, "healthz");
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ database: "up", broker: "disconnected" });
  } finally {
    child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  }
});

test("SIGTERM mid-drain: exit 0, and no row both delivered and left unpublished", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const collector = await collect(mqttUrl, prefix);
  const rows = await insertPending(db.sql, 30_000);
  const port = await freePort();
  const child = spawnRelay({ RELAY_PORT: String(port), MQTT_TOPIC_PREFIX: prefix });
  await waitUntil(async () => (await status(`http://127.0.0.1:${port}/readyz`)) === 200, 10_000, "readyz");
  await waitUntil(async () => (await countWhere(db.sql, "published")) >= 1000, 10_000, "the drain under way");
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
  await new Promise((resolve) => setTimeout(resolve, 300)); // the last PUBLISHes reach the collector

  const pending = new Set((await db.sql<{ id: string }[]>`select id from outbox where published_at is null`).map((r) => r.id));
  const delivered = new Set(collector.ids());
  expect(pending.size).toBeGreaterThan(0); // it was stopped mid-drain
  expect(pending.size).toBeLessThan(rows.length);
  expect([...delivered].filter((id) => pending.has(id))).toEqual([]);
  const published = rows.filter((r) => !pending.has(r.id));
  expect(published.every((r) => delivered.has(r.id))).toBe(true);
  expect(await countWhere(db.sql, "attempted")).toBe(0);
  await collector.close();
});

import { setDefaultTimeout } from "bun:test";
import { afterAll, expect, test } from "bun:test";
import { CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { collect, rawClient } from "../testkit/mqtt.ts";
import { chooseSource, freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

test("services: both variables win, then Docker, else the embedded default", async () => {
  const yes = async () => true;
  const no = async () => false;
  const both = { DATABASE_URL: "postgres://x/db", MQTT_URL: "mqtt://x" };
  expect(await chooseSource({ env: both, dockerAnswers: yes })).toBe("env");
  expect(await chooseSource({ env: {}, dockerAnswers: yes })).toBe("docker");
  expect(await chooseSource({ env: { DATABASE_URL: "postgres://x/db" }, dockerAnswers: yes })).toBe("docker");
  expect(await chooseSource({ env: {}, dockerAnswers: no })).toBe("embedded");
  expect(await chooseSource({ env: { MQTT_URL: "mqtt://x" }, dockerAnswers: no })).toBe("embedded");
});

test("services: the variables are used without asking Docker", async () => {
  let asked = false;
  const both = { DATABASE_URL: "postgres://x/db", MQTT_URL: "mqtt://x" };
  await chooseSource({ env: both, dockerAnswers: async () => (asked = true) });
  expect(asked).toBe(false);
});

test("services: TEST_SERVICES forces a source, and a wrong value is refused by name", async () => {
  const yes = async () => true;
  const both = { DATABASE_URL: "postgres://x/db", MQTT_URL: "mqtt://x" };
  expect(await chooseSource({ env: { ...both, TEST_SERVICES: "embedded" }, dockerAnswers: yes })).toBe("embedded");
  expect(await chooseSource({ env: { TEST_SERVICES: "docker" }, dockerAnswers: async () => false })).toBe("docker");
  await expect(chooseSource({ env: { TEST_SERVICES: "podman" }, dockerAnswers: yes })).rejects.toThrow(/TEST_SERVICES/);
});

setDefaultTimeout(30_000);

const db = await freshDatabase("support");
afterAll(() => db.drop());

test("a fresh database has the schema, and migrating again changes nothing", async () => {
  const tables = await db.sql<{ table_name: string }[]>`
    select table_name from information_schema.tables where table_schema = 'public' order by 1`;
  // schema.sql's tables, and the migrations' own ledger: a new table touches no test.
  const declared = [...(await Bun.file(new URL("../schema.sql", import.meta.url)).text()).matchAll(/^create table (\w+)/gim)].map((m) => m[1]!);
  expect(declared).toContain("charges");
  expect(tables.map((t) => t.table_name)).toEqual([...declared, "schema_history"].sort());
  const { migrate } = await import("../lib/platform/migrations.ts");
  expect(await migrate(db.sql)).toEqual({ kind: "current" });
});

test("waitUntil answers the probe's first value, and names what it waited for at the deadline", async () => {
  let calls = 0;
  expect(await waitUntil(() => (++calls >= 3 ? `after ${calls}` : false), 1000, "three calls")).toBe("after 3");
  await expect(waitUntil(() => undefined, 30, "a value that never comes")).rejects.toThrow(/timed out after 30 ms waiting for a value that never comes/);
});

test("the collector's barrier resolves after the messages published before it have arrived", async () => {
  const { mqttUrl } = await services();
  const prefix = `test/${crypto.randomUUID()}/`;
  const collector = await collect(mqttUrl, prefix);
  const publisher = await rawClient(mqttUrl);
  try {
    const id = crypto.randomUUID();
    const envelope = { id, type: CHARGE_CREATED, aggregateId: id, createdAt: new Date().toISOString(), data: {} };
    publisher.publish(topicOf(prefix, CHARGE_CREATED), JSON.stringify(envelope), { qos: 1 });
    await collector.barrier();
    expect(collector.ids()).toEqual([id]);
    expect(collector.messages[0]?.envelope).toEqual(envelope);
  } finally {
    await publisher.endAsync();
    await collector.close();
  }
});

// Two examples/subscriber.ts processes in one MQTT 5 shared subscription group
// (SUBSCRIBER_SHARE_GROUP) on Mosquitto, with one inbox consumer name: the broker hands each
// event to one of them, and the inbox they share records each event once, a duplicate of an
// event the other member already processed included.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { isShareGroup, sharedSubscriptionFilter } from "../lib/events.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { runToExit, spawnScript, startEntrypoint, type Child } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const EVENTS = 100;

const db = await freshDatabase("subscriber_shared");
const { mqttUrl, mqtt5 } = await services();
afterAll(() => db.drop());

type Line = Record<string, unknown>;

test("sharedSubscriptionFilter: $share/<group>/<prefix>charges/#, and a group that is not one topic level is refused", () => {
  expect(sharedSubscriptionFilter("billing", "prod/")).toBe("$share/billing/prod/charges/#");
  for (const bad of ["", "a/b", "a+", "#"]) {
    expect(isShareGroup(bad)).toBe(false);
    expect(() => sharedSubscriptionFilter(bad, "")).toThrow();
  }
});

test("SUBSCRIBER_SHARE_GROUP without SUBSCRIBER_CLIENT_ID, or with a '/', is one line and exit 1", async () => {
  const env = { DATABASE_URL: db.url, MQTT_URL: mqttUrl };
  for (const extra of [{ SUBSCRIBER_SHARE_GROUP: "g" }, { SUBSCRIBER_SHARE_GROUP: "a/b", SUBSCRIBER_CLIENT_ID: "c" }]) {
    const { code, stderr } = await runToExit(["bun", "examples/subscriber.ts"], { ...env, ...extra });
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toHaveLength(1);
    expect(stderr).toContain("SUBSCRIBER_SHARE_GROUP");
  }
});

// Shared subscriptions are MQTT 5; the embedded broker (aedes) speaks 3.1.1 only.
test.skipIf(!mqtt5)("two subscribers in one share group split the stream: each event received once in total, the inbox holds each once", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const consumer = `shared-${crypto.randomUUID().slice(0, 8)}`;
  const group = `g${crypto.randomUUID().slice(0, 8)}`;
  const members: { child: Child; lines: Line[] }[] = ["a", "b"].map((name) => {
    const lines: Line[] = [];
    const child = spawnScript("examples/subscriber.ts", {
      name: `subscriber ${name}`,
      env: {
        DATABASE_URL: db.url,
        MQTT_URL: mqttUrl,
        MQTT_TOPIC_PREFIX: prefix,
        SUBSCRIBER_CONSUMER: consumer,
        SUBSCRIBER_CLIENT_ID: `${consumer}-${name}`,
        SUBSCRIBER_SHARE_GROUP: group,
      },
      stdout: (line) => lines.push(JSON.parse(line) as Line),
    });
    return { child, lines };
  });
  let alreadyProcessed = "";
  const received = (): Line[] => members.flatMap((m) => m.lines.filter((l) => l.event === "received"));
  try {
    await waitUntil(() => members.every((m) => m.lines.some((l) => l.event === "ready")), 15_000, "both subscribers ready");
    expect(members[0]!.lines.find((l) => l.event === "ready")?.topic).toBe(sharedSubscriptionFilter(group, prefix));

    const rows = await insertPending(db.sql, EVENTS);
    // One event already processed by the group (as if a member had handled it before a redelivery).
    alreadyProcessed = rows[0]!.id;
    await db.sql`insert into inbox (event_id, consumer) values (${alreadyProcessed}, ${consumer})`;
    const relay = await startEntrypoint("relay", { env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" } });
    try {
      await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 20_000, "every row published");
      await waitUntil(() => received().length >= EVENTS, 20_000, "every event received");
    } finally {
      expect(await relay.child.stop()).toBe(0);
    }
    // Each row was published exactly once (no failed or released attempt), so nothing else is on its way.
    const [attempts] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox where attempts > 0 or releases > 0`;
    expect(attempts?.n).toBe(0);
  } finally {
    for (const m of members) m.child.kill("SIGTERM");
  }
  for (const m of members) expect(await m.child.done).toBe(0);

  const all = received();
  const ids = all.map((l) => String(l.id));
  expect(ids).toHaveLength(EVENTS); // a plain subscription would give each member every event
  expect(new Set(ids).size).toBe(EVENTS);
  expect(all.filter((l) => l.duplicate === true).map((l) => l.id)).toEqual([alreadyProcessed]);
  const stopped = members.map((m) => m.lines.at(-1));
  expect(stopped.reduce((n, l) => n + Number(l?.processed), 0)).toBe(EVENTS);
  const [inbox] = await db.sql<{ rows: number; events: number }[]>`
    select count(*)::int as rows, count(distinct event_id)::int as events from inbox where consumer = ${consumer}`;
  expect(inbox).toEqual({ rows: EVENTS, events: EVENTS });
});

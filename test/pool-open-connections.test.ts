// db_client_connections_open on the real `bun api.ts` and `bun relay.ts`: what each process
// says it holds against what the server shows for it in pg_stat_activity, at start, after the
// server ends some of its connections, and after work reopens them.
import { setDefaultTimeout } from "bun:test";
import { afterAll, expect, test } from "bun:test";
import { freshDatabase, services } from "../testkit/services.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { API_APP, RELAY_APP, startEntrypoint, type Service } from "../testkit/processes.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { waitUntil } from "../testkit/wait.ts";
import { valueOf } from "../testkit/prometheus.ts";
import type { Sql } from "../lib/platform/db.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("pool_open");
const { mqttUrl } = await services();
afterAll(() => db.drop());

async function gauge(service: Service, pool: string): Promise<number | undefined> {
  const text = await (await fetch(`${service.base}/metrics`)).text();
  return valueOf(text, "db_client_connections_open", { db_client_connection_pool_name: pool });
}

/** The backends of `app` on this test's database; LISTEN's own connection is not the pool's. */
async function backends(sql: Sql, app: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and application_name = ${app} and query not ilike 'listen%'`;
  return row?.n ?? 0;
}

/** Ends `n` of `app`'s pool backends on the server, as an operator or a restart would. */
async function terminate(sql: Sql, app: string, n: number): Promise<void> {
  await sql`
    select pg_terminate_backend(pid) from pg_stat_activity
     where datname = current_database() and application_name = ${app} and query not ilike 'listen%'
     order by pid limit ${n}`;
}

/** Waits until the gauge and the server agree on `expected`, or on any count when undefined. */
async function agreed(service: Service, app: string, what: string, expected?: number): Promise<number> {
  return await waitUntil(async () => {
    const [said, seen] = [await gauge(service, app), await backends(db.sql, app)];
    return said === seen && (expected === undefined || said === expected) ? said : undefined;
  }, 20_000, what);
}

test("the API: its whole pool open at start, two ended by the server uncounted, reopened by requests", async () => {
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, API_POOL_SIZE: "4", LOG_LEVEL: "warn", ...authEnv() } });
  try {
    expect(await agreed(api, API_APP, "the opened pool counted", 4)).toBe(4);
    await terminate(db.sql, API_APP, 2);
    expect(await agreed(api, API_APP, "the two ended connections uncounted", 2)).toBe(2);
    const headers = { ...(await authHeaders()), "content-type": "application/json" };
    const created = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const res = await fetch(`${api.base}/charges`, { method: "POST", headers: { ...headers, "idempotency-key": crypto.randomUUID() }, body: '{"amountCents":100}' });
        await res.arrayBuffer();
        return { status: res.status, location: res.headers.get("location") };
      }),
    );
    expect(created.filter((c) => c.status !== 201)).toEqual([]);
    // Group commit may serve those eight on the two connections left. Eight reads held behind a
    // lock the test takes each keep a connection busy, so the pool must open the others again.
    let reads: Promise<number[]> | undefined;
    await db.sql.begin(async (tx) => {
      await tx`lock table charges in access exclusive mode`;
      reads = Promise.all(created.map(async ({ location }) => (await fetch(`${api.base}${location}`, { headers })).status));
      await waitUntil(async () => ((await backends(db.sql, API_APP)) === 4 ? true : undefined), 20_000, "the pool opened again behind the lock");
    });
    expect(await reads).toEqual(created.map(() => 200));
    expect(await agreed(api, API_APP, "the reopened connections counted")).toBeGreaterThan(2);
  } finally {
    await api.child.stop();
  }
});

test("the relay: its pool counted without LISTEN's connection, all of it ended by the server, reopened by a drain", async () => {
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: `open-${crypto.randomUUID().slice(0, 8)}/`, LOG_LEVEL: "warn" },
  });
  try {
    await insertPending(db.sql, 20);
    await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 20_000, "the first rows published");
    expect(await agreed(relay, RELAY_APP, "the relay's open connections counted")).toBeGreaterThan(0);
    const before = await backends(db.sql, RELAY_APP);
    await terminate(db.sql, RELAY_APP, before);
    // Its poll may open one again at once: what matters is that the gauge and the server agree,
    // which they cannot if an ended connection stayed counted.
    expect(await agreed(relay, RELAY_APP, "every ended connection uncounted")).toBeLessThanOrEqual(before);
    await insertPending(db.sql, 20);
    await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 20_000, "the next rows published");
    expect(await agreed(relay, RELAY_APP, "the reopened connections counted")).toBeGreaterThan(0);
  } finally {
    await relay.child.stop();
  }
});

// GET /metrics on RELAY_PORT of the real `bun relay.ts`: the names, types and labels of docs/operations.md ("Metrics"),
// values that match the database, the operator port's own request histogram, the process
// metrics, and no per-event value in any label.
import { setDefaultTimeout } from "bun:test";
import { afterAll, expect, test } from "bun:test";
import { CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { countWhere, insertPending } from "../testkit/outbox.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { labelValues, valueOf } from "../testkit/prometheus.ts";
import { mosquittoInstalled, privateMosquitto } from "../testkit/mosquitto.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_metrics");
const { mqttUrl } = await services();
afterAll(() => db.drop());

const UUID_LIKE = /[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}/i;

function value(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

test("the relay's /metrics carries docs/operations.md's outbox metrics with the values the database shows", async () => {
  const prefix = `metrics-${crypto.randomUUID().slice(0, 8)}/`;
  const destination = topicOf(prefix, CHARGE_CREATED);
  const rows = await insertPending(db.sql, 25);
  // A charge without its outbox row, written by hand: the reconciliation alarm.
  await db.sql`insert into charges (id, amount_cents) values (${crypto.randomUUID()}, 100)`;

  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" },
    readyPath: "/healthz",
  });
  try {
    await waitUntil(async () => (await countWhere(db.sql, "published")) === rows.length, 15_000, "all rows published");
    let text = "";
    // The gauges are recomputed every few seconds; wait for a scrape that saw the drain.
    await waitUntil(
      async () => {
        const res = await fetch(`${relay.base}/metrics`).catch(() => undefined);
        text = res?.ok ? await res.text() : "";
        return value(text, "outbox_pending_events") === 0 && value(text, "charges_without_outbox") === 1;
      },
      15_000,
      "gauges after the drain",
    );
    expect(text).toContain("# TYPE outbox_published_total counter");
    expect(value(text, `outbox_published_total{destination="${destination}"}`)).toBe(rows.length);
    expect(text).toContain("# TYPE outbox_publish_errors_total counter");
    expect(value(text, `outbox_publish_errors_total{destination="${destination}"}`)).toBe(0);
    expect(text).toContain("# TYPE outbox_delivery_lag_seconds histogram");
    expect(value(text, `outbox_delivery_lag_seconds_count{destination="${destination}"}`)).toBe(rows.length);
    expect(text).toContain("# TYPE outbox_pending_events gauge");
    expect(text).toContain("# TYPE outbox_oldest_pending_age_seconds gauge");
    expect(value(text, "outbox_oldest_pending_age_seconds")).toBe(0);
    expect(text).toContain("# TYPE charges_without_outbox gauge");

    const labelValues = [...text.matchAll(/="([^"]*)"/g)].map((m) => m[1]!);
    expect(labelValues.filter((v) => UUID_LIKE.test(v))).toEqual([]);
  } finally {
    expect(await relay.child.stop()).toBe(0);
  }
});

test("the operator port's answers in http_server_request_duration_seconds, and the process and pool metrics", async () => {
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: `http-metrics-${crypto.randomUUID().slice(0, 8)}/`, LOG_LEVEL: "warn" },
    readyPath: "/healthz",
  });
  try {
    const ask = async (path: string, method = "GET") => {
      const res = await fetch(`${relay.base}${path}`, { method });
      await res.body?.cancel();
      return res.status;
    };
    // The readiness polls (startEntrypoint's, and this wait for the broker) count too: read a baseline after them.
    await waitUntil(async () => (await ask("/readyz")) === 200, 15_000, "relay ready");
    const before = await (await fetch(`${relay.base}/metrics`)).text();
    const series = (method: string, route: string, status: string) => ({ http_request_method: method, http_route: route, http_response_status_code: status });
    const count = (text: string, labels: Record<string, string>) => valueOf(text, "http_server_request_duration_seconds_count", labels) ?? 0;
    expect(await ask("/healthz")).toBe(200);
    expect(await ask("/healthz")).toBe(200);
    expect(await ask("/readyz")).toBe(200);
    expect(await ask("/healthz", "POST")).toBe(405);
    expect(await ask(`/outbox/${crypto.randomUUID()}`)).toBe(404);
    const text = await (await fetch(`${relay.base}/metrics`)).text();
    expect(text).toContain("# TYPE http_server_request_duration_seconds histogram");
    const delta = (labels: Record<string, string>) => count(text, labels) - count(before, labels);
    expect(delta(series("GET", "/healthz", "200"))).toBe(2);
    expect(delta(series("GET", "/readyz", "200"))).toBe(1);
    expect(delta(series("POST", "/healthz", "405"))).toBe(1);
    expect(delta(series("GET", "(unmatched)", "404"))).toBe(1);
    // The first scrape, answered before this one, is counted under its route.
    expect(delta(series("GET", "/metrics", "200"))).toBe(1);

    expect(text).toContain("# TYPE process_cpu_seconds_total counter");
    expect(value(text, "process_cpu_seconds_total")).toBeGreaterThan(0);
    expect(value(text, "process_resident_memory_bytes")).toBeGreaterThan(1_000_000);
    expect(value(text, "process_heap_used_bytes")).toBeGreaterThan(0);
    expect(value(text, "process_event_loop_delay_seconds")).toBeGreaterThanOrEqual(0);
    expect(valueOf(text, "db_client_connections_max", { db_client_connection_pool_name: "charges-relay" })).toBeGreaterThan(2);
    expect(labelValues(text).filter((v) => UUID_LIKE.test(v))).toEqual([]);
  } finally {
    expect(await relay.child.stop()).toBe(0);
  }
});

test.skipIf(!mosquittoInstalled())("db_client_connections_busy: a batch's transaction holds a connection until its PUBACKs come and it commits", async () => {
  // A private broker, frozen (SIGSTOP) so that a claimed batch waits for its PUBACKs.
  const broker = await privateMosquitto();
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: db.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: `busy-${crypto.randomUUID().slice(0, 8)}/`, LOG_LEVEL: "warn" },
  });
  const busy = async (): Promise<number | undefined> =>
    valueOf(await (await fetch(`${relay.base}/metrics`)).text(), "db_client_connections_busy", { db_client_connection_pool_name: "charges-relay" });
  try {
    // The operations jobs due at start run first.
    await waitUntil(async () => (await busy()) === 0, 15_000, "an idle relay: no transaction in progress");
    broker.signal("SIGSTOP");
    await insertPending(db.sql, 5);
    // The batch's transaction waits for PUBACKs that the frozen broker does not send (for up to
    // the 10 s publish timeout): first seen on the server, then counted by the relay. Not the
    // other way round: an operations job's transaction also counts, and may be what was seen.
    const held = async () => {
      const [row] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
         where datname = current_database() and application_name = 'charges-relay' and state = 'idle in transaction'`;
      return row?.n ?? 0;
    };
    await waitUntil(async () => (await held()) >= 1, 10_000, "the batch's transaction held open on the server");
    expect((await busy()) ?? 0).toBeGreaterThanOrEqual(1);
    broker.signal("SIGCONT");
    await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 15_000, "the batch published and marked");
    await waitUntil(async () => (await busy()) === 0, 10_000, "no transaction in progress once it committed");
  } finally {
    broker.signal("SIGCONT");
    await relay.child.stop();
    await broker.stop();
  }
});

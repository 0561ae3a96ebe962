// The operator kit against the real processes: every metric the Grafana dashboard and the
// alerting rules query is one the API, the relay or the reference subscriber serves, once
// they have done some work; the dashboard imports as is (its data source is a variable); and
// every rule links to a runbook section that exists.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { subscriptionFilter } from "../lib/charges/events.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { startSubscriber } from "../lib/subscriber/subscriber.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { canonicalName, exposedFamilies, metricTypes, selectedNames } from "../testkit/promql.ts";
import { ROOT, startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { countWhere } from "../testkit/outbox.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

// Prometheus's own series for a target, never on a /metrics page.
const SCRAPE_SERIES = new Set(["up"]);

interface Target {
  readonly expr: string;
  readonly datasource?: unknown;
}
interface Panel {
  readonly type: string;
  readonly title: string;
  readonly datasource?: unknown;
  readonly targets?: readonly Target[];
  readonly panels?: readonly Panel[];
}
interface Dashboard {
  readonly panels: readonly Panel[];
  readonly templating: { readonly list: readonly { readonly type: string; readonly name: string; readonly query: string }[] };
}
interface Rule {
  readonly alert: string;
  readonly expr: string;
  readonly for?: string;
  readonly annotations?: Record<string, string>;
}

const read = (path: string): string => readFileSync(`${ROOT}${path}`, "utf8");
const dashboard = JSON.parse(read("monitoring/grafana/dashboard.json")) as Dashboard;
const rules = (Bun.YAML.parse(read("monitoring/prometheus/rules.yml")) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== "row");
const dashboardExprs = panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));

/** The anchors GitHub gives the headings of a Markdown file. */
function anchors(markdown: string): Set<string> {
  const slugs = [...markdown.matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
    m[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-"),
  );
  return new Set(slugs);
}

describe("the kit's files", () => {
  test("metric names come out of PromQL without functions, matchers, ranges or grouping labels", () => {
    const expr = 'histogram_quantile(0.99, sum by (le, http_route) (rate(x_seconds_bucket{job=~"$api_job", code=~"5.."}[$__rate_interval]))) > 0.5 and on (job) up offset 5m';
    expect(selectedNames(expr).sort()).toEqual(["up", "x_seconds_bucket"]);
    expect(selectedNames("deriv(max(a_total)[10m:1m]) / ignoring(x) b > 1e3 unless bool c:rule").sort()).toEqual(["a_total", "b", "c:rule"]);
    const types = new Map([["h", "histogram"], ["c_count", "counter"]]);
    expect(["h_bucket", "h_sum", "h_count", "c_count", "other_sum"].map((n) => canonicalName(n, types))).toEqual(["h", "h", "h", "c_count", "other_sum"]);
  });

  test("the dashboard takes its Prometheus data source from the ${datasource} variable, never a fixed uid", () => {
    expect(dashboard.templating.list.find((v) => v.name === "datasource")).toMatchObject({ type: "datasource", query: "prometheus" });
    const wanted = { type: "prometheus", uid: "${datasource}" };
    expect(panels.length).toBeGreaterThan(0);
    for (const panel of panels) {
      expect({ title: panel.title, datasource: panel.datasource }).toEqual({ title: panel.title, datasource: wanted });
      expect(panel.targets?.length).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) expect(target.datasource).toEqual(wanted);
    }
  });

  test("every rule has a summary, a description and a runbook_url to a section of docs/operations.md", () => {
    const sections = anchors(read("docs/operations.md"));
    expect(rules.length).toBeGreaterThanOrEqual(10);
    for (const rule of rules) {
      const { summary, description, runbook_url: url } = rule.annotations ?? {};
      expect({ alert: rule.alert, summary: typeof summary, description: typeof description }).toEqual({ alert: rule.alert, summary: "string", description: "string" });
      const [path, anchor] = (url ?? "").split("#");
      expect({ alert: rule.alert, path, known: sections.has(anchor ?? "") }).toEqual({ alert: rule.alert, path: "docs/operations.md", known: true });
    }
  });

  test("every link to a section of docs/operations.md from within it resolves", () => {
    const text = read("docs/operations.md");
    const sections = anchors(text);
    const links = [...text.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]!);
    expect(links.filter((anchor) => !sections.has(anchor))).toEqual([]);
  });
});

describe("against the running processes", () => {
  test("every metric of the dashboard and the rules is served once the API, the relay and the subscriber have worked", async () => {
    const families = await scrapeAfterWork();
    const types = new Map<string, string>();
    const wanted = new Set([...dashboardExprs, ...rules.map((r) => r.expr)].flatMap(selectedNames).filter((n) => !SCRAPE_SERIES.has(n)));
    for (const [name, type] of families.types) types.set(name, type);
    const names = [...wanted].map((n) => canonicalName(n, types));
    const unserved = [...new Set(names.filter((n) => !families.exposed.has(n)))].sort();
    expect(unserved).toEqual([]);
  });
});

/** Starts the three, does a little of everything, and reads their /metrics. */
async function scrapeAfterWork(): Promise<{ exposed: Set<string>; types: Map<string, string> }> {
  const db = await freshDatabase("monitoring");
  const { mqttUrl } = await services();
  const prefix = `monitoring-${crypto.randomUUID().slice(0, 8)}/`;
  const telemetry = startTelemetry("charges-subscriber-test", undefined, false);
  const env = { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn" };
  // Everything started is stopped, whichever start fails: a live `bun api.ts` left behind holds
  // its pool for the rest of the run.
  const started: { child: { stop: () => Promise<unknown> } }[] = [];
  let subscriber: ReturnType<typeof startSubscriber> | undefined;
  try {
    const api = await startEntrypoint("api", { env: { ...env, ...authEnv() } });
    started.push(api);
    const relay = await startEntrypoint("relay", { env });
    started.push(relay);
    const sub = startSubscriber({ sql: db.sql, mqttUrl, topic: subscriptionFilter(prefix), consumer: "monitoring", meter: telemetry.provider.getMeter("charges") });
    subscriber = sub;
    await sub.ready;
    await exercise(api.base);
    await waitUntil(async () => (await countWhere(db.sql, "published")) === 2, 15_000, "both events published");
    await waitUntil(() => sub.processed === 2, 15_000, "both events processed by the subscriber");
    // The relay's gauges appear once its operations jobs have run.
    const relayPage = await waitUntil(async () => {
      const page = await scrape(`${relay.base}/metrics`);
      const families = exposedFamilies(page);
      return RELAY_GAUGES.every((name) => families.has(name)) ? page : undefined;
    }, 20_000, "the relay's gauges");
    const pages = [await scrape(`${api.base}/metrics`), relayPage, await (await telemetry.scrape()).text()];
    return { exposed: new Set(pages.flatMap((page) => [...exposedFamilies(page)])), types: new Map(pages.flatMap((page) => [...metricTypes(page)])) };
  } finally {
    await subscriber?.close();
    await Promise.all(started.map((p) => p.child.stop()));
    await telemetry.shutdown();
    await db.drop();
  }
}

// Computed by the operations jobs, every 5 s or every minute, all due at the relay's start.
const RELAY_GAUGES = ["outbox_pending_events", "outbox_parked_events", "outbox_held_events", "outbox_oldest_pending_age_seconds", "charges_without_outbox", "idempotency_stale_started_keys", "idempotency_parked_keys"];

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  return res.text();
}

/** A charge, its replay, a key reused with another body, a request without a token, a read, a refund. */
async function exercise(base: string): Promise<void> {
  const headers = { "content-type": "application/json", ...(await authHeaders()) };
  const key = crypto.randomUUID();
  const post = (path: string, body: unknown, h: Record<string, string>) => fetch(`${base}${path}`, { method: "POST", headers: h, body: JSON.stringify(body) });
  const created = await post("/charges", { amountCents: 4900 }, { ...headers, "idempotency-key": key });
  expect(created.status).toBe(201);
  const { id } = (await created.json()) as { id: string };
  expect((await post("/charges", { amountCents: 4900 }, { ...headers, "idempotency-key": key })).status).toBe(201);
  expect((await post("/charges", { amountCents: 1 }, { ...headers, "idempotency-key": key })).status).toBe(422);
  expect((await post("/charges", { amountCents: 1 }, { "content-type": "application/json", "idempotency-key": crypto.randomUUID() })).status).toBe(401);
  expect((await fetch(`${base}/charges/${id}`, { headers })).status).toBe(200);
  expect((await post(`/charges/${id}/refunds`, { amountCents: 900 }, { ...headers, "idempotency-key": crypto.randomUUID() })).status).toBe(201);
}

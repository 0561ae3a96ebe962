// GET /metrics on the API after a known sequence of requests: exact counter values, the HTTP
// server histogram per route template, and no label value that looks like a per-request id.
import { setDefaultTimeout } from "bun:test";
import { afterAll, expect, test } from "bun:test";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { freshDatabase } from "../testkit/services.ts";
import { getCharge, postCharge, startTestApi } from "../testkit/api.ts";
import { authHeaders, mintTestToken, TEST_TENANT } from "../testkit/auth.ts";
import { newCharge, postRefund, refundBody } from "../testkit/refunds.ts";
import { labelValues, samples, valueOf } from "../testkit/prometheus.ts";
import { createHttpServerMetrics, UNMATCHED_ROUTE } from "../lib/platform/http-metrics.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { AUTH_FAILURE_REASONS } from "../lib/api/auth.ts";
import { OUTCOME_KINDS } from "../lib/idempotency/outcome.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("api_metrics");
const telemetry = startTelemetry("charges-api-test", undefined, false);
const api = await startTestApi(db.url, {}, { metrics: telemetry.scrape, meter: telemetry.provider.getMeter("charges") });
afterAll(async () => {
  await api.close();
  await telemetry.shutdown();
  await db.drop();
});

/**
 * The first /metrics text of the API for which `ready` holds: the text is rendered at most once per
 * API_METRICS_MAX_AGE_MS, so counts of requests just answered appear within that age. Counters
 * only grow: wait until they reach what is expected, then assert them exactly.
 */
async function scrapeUntil(ready: (text: string) => boolean, what: string): Promise<string> {
  return waitUntil(async () => ((text) => ready(text) && text)(await scrape()), 5000, what);
}

async function scrape(): Promise<string> {
  return (await api.fetch(new Request("http://localhost/metrics"))).text();
}

const UUID_LIKE = /[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}/i;

function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const labelText = line.slice(name.length + 1, line.lastIndexOf("}"));
    const have = labelText.split(",");
    if (wanted.every((w) => have.includes(w)) && have.length === wanted.length) return Number(line.split(" ").pop());
  }
  return undefined;
}

// Runs first: nothing has been asked of this API yet.
test("before any request, every series whose labels are known is on /metrics at 0", async () => {
  const text = await (await api.fetch(new Request("http://localhost/metrics"))).text();
  for (const reason of AUTH_FAILURE_REASONS) expect([reason, sample(text, "auth_failures_total", { reason })]).toEqual([reason, 0]);
  for (const endpoint of ["POST /charges", "POST /charges/:id/refunds"]) {
    for (const outcome of OUTCOME_KINDS) {
      expect([endpoint, outcome, sample(text, "idempotency_requests_total", { endpoint, outcome })]).toEqual([endpoint, outcome, 0]);
    }
  }
});

test("idempotency_requests_total counts each outcome exactly, without keys or ids in labels", async () => {
  const a = crypto.randomUUID();
  const b = crypto.randomUUID();
  const body = '{"amountCents":4900}';
  expect((await postCharge(api, body, { key: a })).status).toBe(201); // created
  expect((await postCharge(api, body, { key: b })).status).toBe(201); // created
  expect((await postCharge(api, body, { key: a })).status).toBe(201); // replayed
  expect((await postCharge(api, body, { key: a })).status).toBe(201); // replayed
  expect((await postCharge(api, body, { key: b })).status).toBe(201); // replayed
  expect((await postCharge(api, '{"amountCents":1}', { key: a })).status).toBe(422); // payload_conflict
  expect((await postCharge(api, body, { key: '"nope' })).status).toBe(400); // not counted: no key
  // Refused for their token: auth_failures_total, never an idempotency outcome.
  expect((await postCharge(api, body, { key: crypto.randomUUID(), tenant: null })).status).toBe(401);
  const expired = await mintTestToken({ ttlSeconds: -3600 });
  expect((await postCharge(api, body, { key: a, headers: { authorization: `Bearer ${expired}` } })).status).toBe(401);
  expect((await postCharge(api, "{}", { key: crypto.randomUUID() })).status).toBe(400); // not counted: bad body

  // in_flight: the test holds the key's advisory lock, as a request in flight would.
  const c = crypto.randomUUID();
  const holder = await db.sql.reserve();
  try {
    await holder`begin`;
    const { advisoryLockId } = await import("../lib/idempotency/keys.ts");
    await holder`select pg_advisory_xact_lock(${advisoryLockId(TEST_TENANT, c, "POST /charges")}::bigint)`;
    expect((await postCharge(api, body, { key: c })).status).toBe(409);
  } finally {
    await holder`rollback`;
    holder.release();
  }

  const res = await api.fetch(new Request("http://localhost/metrics"));
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  const counted = (text: string, outcome: string) => sample(text, "idempotency_requests_total", { endpoint: "POST /charges", outcome }) ?? 0;
  const expected = { created: 2, replayed: 3, payload_conflict: 1, in_flight: 1 };
  const text = await scrapeUntil((t) => Object.entries(expected).every(([outcome, n]) => counted(t, outcome) >= n), "the outcomes counted");
  expect(text).toContain("# TYPE idempotency_requests_total counter");
  const at = (outcome: string) => sample(text, "idempotency_requests_total", { endpoint: "POST /charges", outcome });
  expect(at("created")).toBe(2);
  expect(at("replayed")).toBe(3);
  expect(at("payload_conflict")).toBe(1);
  expect(at("in_flight")).toBe(1);
  expect(text).toContain("# TYPE auth_failures_total counter");
  expect(sample(text, "auth_failures_total", { reason: "missing" })).toBe(1);
  expect(sample(text, "auth_failures_total", { reason: "expired" })).toBe(1);

  const labelValues = [...text.matchAll(/="([^"]*)"/g)].map((m) => m[1]!);
  expect(labelValues.length).toBeGreaterThan(0);
  expect(labelValues.filter((v) => UUID_LIKE.test(v))).toEqual([]);

  const [rows] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  expect(rows?.n).toBe(2);
});

test("group commit's totals: charge statements sent, the requests they answered, and none queued when idle", async () => {
  const read = (text: string) => ({
    statements: sampleBare(text, "api_charge_statements_total"),
    requests: sampleBare(text, "api_charge_statement_requests_total"),
    queued: sampleBare(text, "api_charge_requests_queued"),
  });
  // No request since the last text this API rendered (each test's last scrape waited for its
  // own requests' counts): whether served from the cache or rendered now, it is the count before.
  const before = read(await scrape());
  // One at a time: each request finds a statement free and goes alone.
  for (let i = 0; i < 3; i++) expect((await postCharge(api, '{"amountCents":4900}', { key: crypto.randomUUID() })).status).toBe(201);
  const after = read(await scrapeUntil((t) => read(t).requests! - before.requests! >= 3, "the three requests' statements counted"));
  expect(after.statements! - before.statements!).toBe(3);
  expect(after.requests! - before.requests!).toBe(3);
  expect(after.queued).toBe(0);
});

function sampleBare(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{}`));
  return line === undefined ? undefined : Number(line.split(" ").pop());
}

test("http_server_request_duration_seconds: one series per route template, method and status, exact counts, no id in a label", async () => {
  // An API of its own, so the counts are this test's requests only.
  const own = startTelemetry("charges-api-http-test", undefined, false);
  const httpMetrics = createHttpServerMetrics();
  own.addHistogram(httpMetrics);
  const app = await startTestApi(db.url, {}, { metrics: own.scrape, meter: own.provider.getMeter("charges"), httpMetrics });
  try {
    const key = crypto.randomUUID();
    const chargeId = await newCharge(app, 5000); // POST /charges 201
    const refundKey = crypto.randomUUID();
    expect((await postRefund(app, chargeId, refundBody(100), { key: refundKey })).status).toBe(201);
    expect((await postRefund(app, chargeId, refundBody(100), { key: refundKey })).status).toBe(201); // a replay
    expect((await getCharge(app, chargeId)).status).toBe(200);
    expect((await postCharge(app, '{"amountCents":4900}', { key, tenant: null })).status).toBe(401);
    expect((await app.fetch(new Request(`http://localhost/no/such/${chargeId}`))).status).toBe(404);
    expect((await app.fetch(new Request(`http://localhost/charges/${chargeId}/nope`, { headers: await authHeaders() }))).status).toBe(404);
    expect((await app.fetch(new Request("http://localhost/healthz", { method: "HEAD" }))).status).toBe(200);
    expect((await app.fetch(new Request("http://localhost/healthz", { method: "PURGE" }))).status).toBe(404);

    // Recorded in onAfterResponse, once each answer has left: the scrape waits for all nine.
    await waitUntil(() => [...httpMetrics.series()].reduce((n, s) => n + s.count, 0) === 9, 5000, "nine requests on the histogram");
    const text = await (await app.fetch(new Request("http://localhost/metrics"))).text();
    const count = (method: string, route: string, status: string) =>
      valueOf(text, "http_server_request_duration_seconds_count", { http_request_method: method, http_route: route, http_response_status_code: status });
    expect(text).toContain("# TYPE http_server_request_duration_seconds histogram");
    expect(count("POST", "/charges", "201")).toBe(1);
    expect(count("POST", "/charges/:id/refunds", "201")).toBe(2);
    expect(count("GET", "/charges/:id", "200")).toBe(1);
    expect(count("POST", "/charges", "401")).toBe(1);
    expect(count("GET", UNMATCHED_ROUTE, "404")).toBe(2);
    expect(count("HEAD", "/healthz", "200")).toBe(1);
    expect(count("_OTHER", UNMATCHED_ROUTE, "404")).toBe(1);
    // Exactly those series: nothing else was asked (this scrape is counted after it answers).
    const all = samples(text).filter((s) => s.name === "http_server_request_duration_seconds_count");
    expect(all.reduce((n, s) => n + s.value, 0)).toBe(9);
    // Every request answered within the request time bound: its +Inf bucket equals the 10 s one.
    for (const s of all) {
      const le = (bound: string) => valueOf(text, "http_server_request_duration_seconds_bucket", { ...s.labels, le: bound });
      expect(le("10")).toBe(s.value);
      expect(le("+Inf")).toBe(s.value);
    }
    const routes = new Set(all.map((s) => s.labels.http_route));
    expect([...routes].every((r) => app.routes.some((route) => route.path === r) || r === UNMATCHED_ROUTE)).toBe(true);
    const values = labelValues(text);
    for (const secret of [chargeId, key, refundKey, TEST_TENANT]) expect(values.some((v) => v.includes(secret))).toBe(false);
    expect(values.filter((v) => UUID_LIKE.test(v))).toEqual([]);
  } finally {
    await app.close();
    await own.shutdown();
  }
});

test("API_HTTP_METRICS: on by default, 0 turns it off, anything else is refused by name", () => {
  expect(loadConfig({}).apiHttpMetrics).toBe(true);
  expect(loadConfig({ API_HTTP_METRICS: "0" }).apiHttpMetrics).toBe(false);
  expect(() => loadConfig({ API_HTTP_METRICS: "yes" })).toThrow(/API_HTTP_METRICS/);
});

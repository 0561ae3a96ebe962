// Fair admission and every answer seen, on a real `bun api.ts` driven over raw sockets: a
// tenant's bodies that never come hold at most its share of the places in flight (its next
// request is a 503, another tenant is served), each gets a 408 after API_BODY_TIMEOUT_MS that
// frees its place; one key's places are API_MAX_IN_FLIGHT_PER_KEY (past them, the 409 of a key
// in flight); past API_MAX_IN_FLIGHT anyone gets a 503; and every refusal (503, 408, 413,
// 429, a body that is not JSON) has its log line and its sample in
// http_server_request_duration_seconds. Nothing waits on a timer: each step waits for what the
// process answers.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { answerWithoutBody, http11, raw, type RawResponse } from "../testkit/raw-http.ts";
import { counts } from "../testkit/api.ts";
import { valueOf } from "../testkit/prometheus.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const BODY_TIMEOUT_MS = 1500;
const PROBLEMS = "https://charges.example/problems/";
const UNKNOWN = "7d3a3c9e-7b8b-4a57-9d64-0cf3c7c1e3a1";

const db = await freshDatabase("api_fair");
const lines: Record<string, unknown>[] = [];
const api = await startEntrypoint("api", {
  env: {
    DATABASE_URL: db.url,
    ...authEnv(),
    LOG_LEVEL: "info",
    API_POOL_SIZE: "2",
    API_MAX_IN_FLIGHT: "4",
    API_MAX_IN_FLIGHT_PER_TENANT: "2",
    API_MAX_IN_FLIGHT_PER_KEY: "1",
    API_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
    API_RATE_LIMIT: "1",
    API_RATE_BURST: "30",
    API_RATE_LIMIT_HOLD_MS: "0",
  },
  stdout: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
});
afterAll(async () => {
  await killAll();
  await db.drop();
});

async function head(method: string, path: string, tenant: string, extra: string[] = []): Promise<string[]> {
  return http11(`${method} ${path}`, "host: api", `authorization: Bearer ${await tokenFor(tenant)}`, ...extra);
}

/** A POST /charges whose announced body never comes: resolves with the answer, the socket left open until then. */
async function stalledPost(tenant: string, length = 40, key = crypto.randomUUID()): Promise<RawResponse> {
  const lines = await head("POST", "/charges", tenant, ["content-type: application/json", `idempotency-key: ${key}`, `content-length: ${length}`]);
  return answerWithoutBody(api.port, lines.filter((l) => l !== "connection: close"));
}

async function post(tenant: string, body = '{"amountCents":100}', key = crypto.randomUUID()): Promise<RawResponse> {
  return raw(api.port, await head("POST", "/charges", tenant, ["content-type: application/json", `idempotency-key: ${key}`]), body);
}

async function get(tenant: string): Promise<RawResponse> {
  return raw(api.port, await head("GET", `/charges/${UNKNOWN}`, tenant));
}

async function metricsText(): Promise<string> {
  return (await fetch(`${api.base}/metrics`)).text();
}

/**
 * The places taken in flight, as /metrics says (api_requests_in_flight). The text is at most
 * API_METRICS_MAX_AGE_MS old: callers wait for the count they expect with waitUntil.
 */
async function inFlight(): Promise<number> {
  return valueOf(await metricsText(), "api_requests_in_flight") ?? Number.NaN;
}

/**
 * Every place free: a request's is given back once its answer has left, a turn after the client
 * has it. After a wait that saw places taken, a 0 can only come from a text rendered since.
 */
async function settled(): Promise<void> {
  await waitUntil(async () => (await inFlight()) === 0, 10_000, "no request in flight");
}

function expectProblem(res: RawResponse, status: number, slug: string): Record<string, unknown> {
  expect(res.status).toBe(status);
  expect(res.headers["content-type"]).toBe("application/problem+json");
  const body = JSON.parse(res.body) as Record<string, unknown>;
  expect(body).toMatchObject({ type: PROBLEMS + slug, status });
  return body;
}

test("a tenant's stalled bodies hold its share and no more: its next request is a 503, another tenant is served; each body is a 408 after API_BODY_TIMEOUT_MS, and frees its place", async () => {
  await settled();
  const sent = performance.now();
  const stalled = [stalledPost("tenant-slow"), stalledPost("tenant-slow")].map((p) => p.then((res) => ({ res, ms: performance.now() - sent })));
  await waitUntil(async () => (await inFlight()) === 2, 10_000, "both stalled requests admitted");
  const refused = await get("tenant-slow");
  expect(expectProblem(refused, 503, "overloaded").detail).toContain("API_MAX_IN_FLIGHT_PER_TENANT");
  expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1);
  // The process has places left for another tenant.
  expect((await post("tenant-other")).status).toBe(201);
  for (const { res, ms } of await Promise.all(stalled)) {
    expectProblem(res, 408, "body-timeout");
    expect(ms).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 1);
  }
  // The places are freed once the 408s have left.
  await settled();
  expect((await get("tenant-slow")).status).toBe(404);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("past API_MAX_IN_FLIGHT anyone gets a 503; every refusal (503, 408, 413, 429, a body that is not JSON) has its log line and its histogram sample", async () => {
  await settled();
  const before = lines.length;
  const stalled = [stalledPost("tenant-a"), stalledPost("tenant-a"), stalledPost("tenant-b"), stalledPost("tenant-b")];
  await waitUntil(async () => (await inFlight()) === 4, 10_000, "the four stalled requests admitted");
  expect(expectProblem(await get("tenant-c"), 503, "overloaded").detail).toContain("API_MAX_IN_FLIGHT");
  for (const res of await Promise.all(stalled)) expectProblem(res, 408, "body-timeout");
  await settled();
  expectProblem(await stalledPost("tenant-c", 20_000), 413, "body-too-large");
  expectProblem(await post("tenant-c", '{"amountCents":'), 400, "invalid-body");
  const limited = await waitUntil(async () => ((res) => res.status === 429 && res)(await get("tenant-r")), 10_000, "tenant-r past its burst", 0);
  expectProblem(limited, 429, "rate-limited");
  const statuses = [503, 408, 413, 400, 429];
  // Each line is written once its answer has left.
  const logged = await waitUntil(() => {
    const mine = lines.slice(before).filter((l) => l.msg === "request" && String(l.route).startsWith("/charges"));
    return statuses.every((s) => mine.some((l) => l.status === s)) && mine;
  }, 10_000, "a log line per refusal");
  expect(logged.filter((l) => l.status === 408)).toHaveLength(4);
  expect(logged.find((l) => l.status === 503)).toMatchObject({ method: "GET", route: "/charges/:id", level: "error" });
  // The text is rendered at most once per API_METRICS_MAX_AGE_MS: wait for one that has every refusal.
  const count = (text: string, method: string, route: string, status: number) =>
    valueOf(text, "http_server_request_duration_seconds_count", { http_request_method: method, http_route: route, http_response_status_code: String(status) }) ?? 0;
  const refusals: [string, string, number][] = [["POST", "/charges", 408], ["POST", "/charges", 413], ["POST", "/charges", 400], ["GET", "/charges/:id", 503], ["GET", "/charges/:id", 429]];
  const text = await waitUntil(async () => ((t) => refusals.every(([m, r, s]) => count(t, m, r, s) > 0) && t)(await metricsText()), 5000, "a sample per refusal");
  const series = (method: string, route: string, status: number) => count(text, method, route, status);
  expect(series("POST", "/charges", 408)).toBeGreaterThanOrEqual(4);
  expect(series("POST", "/charges", 413)).toBeGreaterThanOrEqual(1);
  expect(series("POST", "/charges", 400)).toBeGreaterThanOrEqual(1);
  expect(series("GET", "/charges/:id", 503)).toBeGreaterThanOrEqual(1);
  expect(series("GET", "/charges/:id", 429)).toBeGreaterThanOrEqual(1);
});

test("a key holding its places (API_MAX_IN_FLIGHT_PER_KEY): the next request of it is the 409 of a key in flight at once, nothing written; the tenant's other keys are served", async () => {
  await settled();
  const key = crypto.randomUUID();
  const stalled = stalledPost("tenant-k", 40, key);
  await waitUntil(async () => (await inFlight()) === 1, 10_000, "the stalled request admitted");
  const refused = await post("tenant-k", '{"amountCents":100}', key);
  expect(expectProblem(refused, 409, "request-in-flight").detail).toContain("API_MAX_IN_FLIGHT_PER_KEY");
  expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1);
  expect((await post("tenant-k")).status).toBe(201);
  expectProblem(await stalled, 408, "body-timeout");
  await settled();
  // The key was never claimed: its first complete request creates.
  expect((await post("tenant-k", '{"amountCents":100}', key)).status).toBe(201);
});

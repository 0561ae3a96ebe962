// Admission control, against real APIs on a real database: a tenant past its
// token bucket gets a 429 problem with Retry-After and writes nothing, while another tenant is
// served; past API_MAX_IN_FLIGHT a /charges request gets a 503 problem at once while the
// operator's routes still answer; /readyz answers from one probe a second; OPERATOR_PORT moves
// the operator's routes off the public port, and the document there still names every route.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import postgres from "postgres";
import { counts, getCharge, postCharge, startTestApi, waitForApiBlockedOnLock } from "../testkit/api.ts";
import { freshDatabase } from "../testkit/services.ts";
import { holdKey } from "../testkit/database.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { createReadiness, READY_MAX_AGE_MS } from "../lib/api/readiness.ts";
import { createAdmission } from "../lib/api/admission.ts";
import { createAuthenticator } from "../lib/api/auth.ts";
import { createApiMetrics } from "../lib/api/metrics.ts";
import { createIdempotencyCore } from "../lib/idempotency/run.ts";
import { createApiHandler } from "../lib/api/http/pipeline.ts";
import { SCHEMAS } from "../lib/api/routes.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { createSql } from "../lib/platform/db.ts";
import { silentLogger } from "../lib/platform/log.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("api_admission");
afterAll(() => db.drop());

const UNKNOWN = "7d3a3c9e-7b8b-4a57-9d64-0cf3c7c1e3a1";
const PROBLEMS = "https://charges.example/problems/";

async function expectProblem(res: Response, status: number, slug: string): Promise<void> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(await res.json()).toMatchObject({ type: PROBLEMS + slug, status });
}

describe("per-tenant rate limit", () => {
  test("past its burst a tenant gets 429 + Retry-After and writes nothing; another tenant is served", async () => {
    // One token a minute: the bucket does not refill within the test.
    const api = await startTestApi(db.url, { API_RATE_LIMIT: "1", API_RATE_BURST: "3" });
    try {
      for (let i = 0; i < 3; i++) expect((await getCharge(api, UNKNOWN, "tenant-a")).status).toBe(404);
      const limited = await getCharge(api, UNKNOWN, "tenant-a");
      await expectProblem(limited, 429, "rate-limited");
      expect(limited.headers.get("retry-after")).toBe("1");
      const post = await postCharge(api, '{"amountCents":100}', { key: crypto.randomUUID(), tenant: "tenant-a" });
      await expectProblem(post, 429, "rate-limited");
      expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
      // Another tenant has its own bucket.
      expect((await postCharge(api, '{"amountCents":100}', { key: crypto.randomUUID(), tenant: "tenant-b" })).status).toBe(201);
      // A request without a token is refused on the token, not counted on anyone's bucket.
      expect((await api.fetch(new Request(`http://localhost/charges/${UNKNOWN}`))).status).toBe(401);
      // The operator's routes have no bucket.
      expect((await api.fetch(new Request("http://localhost/healthz"))).status).toBe(200);
    } finally {
      await api.close();
      await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
    }
  });

  test("a refusal is sent API_RATE_LIMIT_HOLD_MS late and held out of API_MAX_IN_FLIGHT: another tenant is served meanwhile", async () => {
    // A client that never waits for Retry-After gets one refusal per connection per hold, so
    // its refusals cannot take the CPU; and the refusals it holds do not count in flight, so
    // they do not turn another tenant away with a 503. The longest hold, so that the other tenant's answers
    // come within it however loaded the machine.
    const HOLD_MS = 1000;
    const config = loadConfig({ DATABASE_URL: db.url, ...authEnv(), API_RATE_LIMIT: "1", API_RATE_BURST: "4", API_MAX_IN_FLIGHT: "4", API_MAX_IN_FLIGHT_PER_TENANT: "4", API_RATE_LIMIT_HOLD_MS: String(HOLD_MS) });
    const admission = createAdmission(config.admission);
    const sql = createSql(db.url, { max: 4 });
    const deps = { sql, core: createIdempotencyCore(sql, { ttlSeconds: 60 }), auth: createAuthenticator(config.auth), log: silentLogger, counters: createApiMetrics(), admission, readiness: createReadiness() };
    const handle = createApiHandler(SCHEMAS, deps);
    const get = (headers: Record<string, string>) => handle(new Request(`http://localhost/charges/${UNKNOWN}`, { headers }));
    const [a, b] = [await authHeaders("tenant-a"), await authHeaders("tenant-b")];
    try {
      // Tenant a spends its burst; tenant b keeps its own.
      expect((await Promise.all(Array.from({ length: 4 }, () => get(a)))).map((r) => r.status)).toEqual([404, 404, 404, 404]);
      const sent = performance.now();
      const refused = Array.from({ length: 3 }, () => get(a).then((res) => ({ res, ms: performance.now() - sent })));
      // Held, and every answer so far counted out of flight (that happens once it has left).
      await waitUntil(() => admission.held === 3 && admission.inFlight === 0, HOLD_MS, "the three refusals held, none in flight");
      // As many requests in flight as API_MAX_IN_FLIGHT, while the three are held.
      const others = await Promise.all(Array.from({ length: 4 }, () => get(b)));
      const othersMs = performance.now() - sent;
      for (const { res, ms } of await Promise.all(refused)) {
        await expectProblem(res, 429, "rate-limited");
        expect(ms).toBeGreaterThanOrEqual(HOLD_MS - 1);
      }
      expect(others.map((r) => r.status)).toEqual([404, 404, 404, 404]);
      expect(othersMs).toBeLessThan(HOLD_MS);
      expect(admission.inFlight).toBe(0);
    } finally {
      await sql.end();
    }
  });

  test("the default limit (API_RATE_LIMIT unset) lets a burst of 200 requests of one tenant through", async () => {
    const api = await startTestApi(db.url);
    try {
      const statuses = await Promise.all(Array.from({ length: 200 }, () => getCharge(api, UNKNOWN).then((r) => r.status)));
      expect(new Set(statuses)).toEqual(new Set([404]));
    } finally {
      await api.close();
    }
  });
});

describe("requests in flight", () => {
  test("past API_MAX_IN_FLIGHT: 503 overloaded + Retry-After at once, /healthz still answers; below it again, served", async () => {
    const api = await startTestApi(db.url, { API_MAX_IN_FLIGHT: "1" });
    const key = crypto.randomUUID();
    const held = await holdKey(db.sql, key);
    try {
      // The first request waits on the held key, inside its statement: it is in flight.
      const first = postCharge(api, '{"amountCents":100}', { key });
      await waitForApiBlockedOnLock(db.sql);
      await expectProblem(await getCharge(api, UNKNOWN), 503, "overloaded");
      await expectProblem(await postCharge(api, '{"amountCents":100}', { key: crypto.randomUUID() }), 503, "overloaded");
      expect((await api.fetch(new Request("http://localhost/healthz"))).status).toBe(200);
      expect((await api.fetch(new Request("http://localhost/readyz"))).status).toBe(200);
      await held.release();
      expect((await first).status).toBe(201);
      // Counted out once its answer has left (onAfterResponse).
      await waitUntil(async () => (await getCharge(api, UNKNOWN)).status === 404, 5000, "a request served again");
      expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
    } finally {
      await held.release();
      await api.close();
      await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
    }
  });
});

describe("/readyz", () => {
  test("one probe of the database answers every /readyz for READY_MAX_AGE_MS", async () => {
    const sent: string[] = [];
    const sql = postgres(db.url, { max: 2, debug: (_connection, query) => void (query.includes("select 1") && sent.push(query)) });
    let now = 0;
    const readiness = createReadiness(() => now);
    try {
      const answers = await Promise.all(Array.from({ length: 50 }, () => readiness.check(sql)));
      expect(new Set(answers)).toEqual(new Set([true]));
      expect(sent).toHaveLength(1);
      now += READY_MAX_AGE_MS - 1;
      expect(await readiness.check(sql)).toBe(true);
      expect(sent).toHaveLength(1);
      now += 1;
      expect(await readiness.check(sql)).toBe(true);
      expect(sent).toHaveLength(2);
    } finally {
      await sql.end();
    }
  });
});

describe("OPERATOR_PORT", () => {
  test("the operator's routes move to their port; the public port serves the API only", async () => {
    const { freePort } = await import("../dev/ports.ts");
    const operatorPort = await freePort();
    const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", OPERATOR_PORT: String(operatorPort), ...authEnv() }, readyPath: false });
    try {
      const operator = `http://127.0.0.1:${operatorPort}`;
      // The operator port opens after the public one: once it is ready, both are.
      await waitUntil(async () => (await fetch(`${operator}/readyz`).catch(() => undefined))?.status === 200, 20_000, "the operator port");
      for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"]) {
        expect([path, (await fetch(`${operator}${path}`)).status]).toEqual([path, 200]);
        expect([path, (await fetch(`${api.base}${path}`)).status]).toEqual([path, 404]);
      }
      // The document on the operator's port still describes every route, the public port's too.
      const doc = (await (await fetch(`${operator}/openapi.json`)).json()) as { paths: Record<string, Record<string, { operationId?: string }>> };
      const operations = Object.values(doc.paths).flatMap((methods) => Object.values(methods).map((op) => op.operationId));
      for (const id of ["createCharge", "createRefund", "getCharge", "getChargeEvents", "getRefund", "getIdempotencyKey", "health", "ready", "metrics"]) expect(operations).toContain(id);
      const created = await fetch(`${api.base}/charges`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...(await authHeaders()) },
        body: '{"amountCents":100}',
      });
      expect(created.status).toBe(201);
      expect((await fetch(`${operator}/charges`, { method: "POST" })).status).toBe(404);
    } finally {
      await api.child.stop();
    }
  });
});

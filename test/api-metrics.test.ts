// GET /metrics on the API after a known sequence of requests: exact counter values, and no
// label value that looks like a per-request id.
import { setDefaultTimeout } from "bun:test";
import { afterAll, expect, test } from "bun:test";
import { startTelemetry } from "../lib/shared/telemetry.ts";
import { freshDatabase } from "../testkit/services.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { mintTestToken, TEST_TENANT } from "../testkit/auth.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("api_metrics");
const telemetry = startTelemetry("charges-api-test", undefined, false);
const api = await startTestApi(db.url, {}, { metrics: telemetry.scrape, meter: telemetry.provider.getMeter("charges") });
afterAll(async () => {
  await api.close();
  await telemetry.shutdown();
  await db.drop();
});

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
    const { advisoryLockId } = await import("../lib/api/core/fingerprint.ts");
    await holder`select pg_advisory_xact_lock(${advisoryLockId(TEST_TENANT, c, "POST /charges")}::bigint)`;
    expect((await postCharge(api, body, { key: c })).status).toBe(409);
  } finally {
    await holder`rollback`;
    holder.release();
  }

  const res = await api.fetch(new Request("http://localhost/metrics"));
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  const text = await res.text();
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
  const read = async () => {
    const text = await (await api.fetch(new Request("http://localhost:3000/metrics"))).text();
    return {
      statements: sampleBare(text, "api_charge_statements_total"),
      requests: sampleBare(text, "api_charge_statement_requests_total"),
      queued: sampleBare(text, "api_charge_requests_queued"),
    };
  };
  const before = await read();
  // One at a time: each request finds a statement free and goes alone.
  for (let i = 0; i < 3; i++) expect((await postCharge(api, '{"amountCents":4900}', { key: crypto.randomUUID() })).status).toBe(201);
  const after = await read();
  expect(after.statements! - before.statements!).toBe(3);
  expect(after.requests! - before.requests!).toBe(3);
  expect(after.queued).toBe(0);
});

function sampleBare(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{}`));
  return line === undefined ? undefined : Number(line.split(" ").pop());
}

// The HTTP edge, with raw sockets against a real server: requests without Host or with a
// short Host route normally, and whatever fails outside a route is an RFC 9457 problem,
// never HTML or a stack trace. Plus: request logs carry a hash of the key, never the key.
import { waitUntil } from "../testkit/wait.ts";
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createHash, createHmac } from "node:crypto";
import { apiTestContext, postCharge, startTestApi } from "../testkit/api.ts";
import { serve } from "../lib/platform/runtime.ts";
import { createLogger } from "../lib/platform/log.ts";
import { tokenFor } from "../testkit/auth.ts";
import { http10, http11, raw } from "../testkit/raw-http.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api_edge");
const server = serve(0, api.fetch, "127.0.0.1");
afterAll(() => server.stop());

const bearer = `authorization: Bearer ${await tokenFor()}`;
const chargeHeaders = (key: string) => ["content-type: application/json", `idempotency-key: ${key}`, bearer];

async function chargeRows(id: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges where id = ${id}::uuid`;
  return row!.n;
}

describe("no Host header (HTTP/1.0)", () => {
  test("GET /healthz → 200 JSON", async () => {
    const res = await raw(server.port, http10("GET /healthz"));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ status: "ok" });
  });

  test("POST /charges → 201, and the charge it names is in the database", async () => {
    const res = await raw(server.port, http10("POST /charges", ...chargeHeaders(crypto.randomUUID())), '{"amountCents":700}');
    expect(res.status).toBe(201);
    const charge = JSON.parse(res.body) as { id: string; amountCents: number };
    expect(charge.amountCents).toBe(700);
    expect(res.headers.location).toBe(`/charges/${charge.id}`);
    expect(await chargeRows(charge.id)).toBe(1);
  });

  test("an unknown route → 404 problem, path and query kept through the re-addressing", async () => {
    const res = await raw(server.port, http10("GET /nope?x=1"));
    expect(res.status).toBe(404);
    expect(res.headers["content-type"]).toBe("application/problem+json");
    const id = crypto.randomUUID();
    const missing = await raw(server.port, http10(`GET /charges/${id}?verbose=1`, bearer));
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body).detail).toContain(id);
  });
});

describe.each(["api", "api:80", "a", "ab:3000"])("Host: %s", (host) => {
  test("GET /healthz, POST /charges and GET /charges/:id route normally", async () => {
    const health = await raw(server.port, http11("GET /healthz", `host: ${host}`));
    expect(health.status).toBe(200);
    const created = await raw(server.port, http11("POST /charges", `host: ${host}`, ...chargeHeaders(crypto.randomUUID())), '{"amountCents":5}');
    expect(created.status).toBe(201);
    const { id } = JSON.parse(created.body) as { id: string };
    expect(await chargeRows(id)).toBe(1);
    const got = await raw(server.port, http11(`GET /charges/${id}`, `host: ${host}`, bearer));
    expect(got.status).toBe(200);
    // The same charge, as GET shows it now: with its refunded total (none yet).
    expect(JSON.parse(got.body)).toEqual({ ...(JSON.parse(created.body) as object), refundedCents: 0 });
  });
});

test("a chunked POST with Host: api keeps its body through the re-addressing", async () => {
  const head = http11("POST /charges", "host: api", ...chargeHeaders(crypto.randomUUID()));
  const res = await raw(server.port, head, '{"amountCents":77}', "chunked");
  expect(res.status).toBe(201);
  const { id, amountCents } = JSON.parse(res.body) as { id: string; amountCents: number };
  expect(amountCents).toBe(77);
  expect(await chargeRows(id)).toBe(1);
});

describe("failures outside a route", () => {
  test("a handler that throws → 500 problem+json without the message, a path or a stack", async () => {
    const secret = "boom at /srv/secret/file.ts:12";
    const failing = serve(0, () => Promise.reject(new Error(secret)), "127.0.0.1");
    const throwing = serve(0, () => { throw new Error(secret); }, "127.0.0.1");
    try {
      for (const s of [failing, throwing]) {
        const res = await raw(s.port, http10("GET /"));
        expect(res.status).toBe(500);
        expect(res.headers["content-type"]).toBe("application/problem+json");
        expect(JSON.parse(res.body)).toMatchObject({ type: "about:blank", status: 500 });
        expect(res.body).not.toContain("boom");
        expect(res.body).not.toContain("/srv/");
        expect(res.body.length).toBeLessThan(200);
      }
    } finally {
      await failing.stop();
      await throwing.stop();
    }
  });
});

describe("request logs", () => {
  test("a request's log line carries the first 12 hex of the key's HMAC-SHA256 under API_KEY_HASH_SECRET, never the key", async () => {
    const lines: string[] = [];
    const secret = "edge-test-key-hash-secret-of-32-bytes";
    const logged = await startTestApi(db.url, { LOG_LEVEL: "info", API_KEY_HASH_SECRET: secret }, { logger: createLogger("info", "api", (l) => lines.push(l)) });
    try {
      const key = crypto.randomUUID();
      expect((await postCharge(logged, '{"amountCents":9}', { key: `"${key.toUpperCase()}"` })).status).toBe(201);
      // Logged in onAfterResponse, once the answer has left.
      const line = await waitUntil(() => lines.find((l) => JSON.parse(l).msg === "request"), 5000, "the request's log line");
      expect(line!.toLowerCase()).not.toContain(key);
      expect(line!.toLowerCase()).not.toContain(key.replace(/-/g, ""));
      const expected = createHmac("sha256", secret).update(key).digest("hex").slice(0, 12);
      // Not the unkeyed hash a dictionary of guessable keys reverses.
      expect(expected).not.toBe(createHash("sha256").update(key).digest("hex").slice(0, 12));
      expect(JSON.parse(line!)).toMatchObject({ route: "/charges", status: 201, outcome: "created", keyHash: expected });
    } finally {
      await logged.close();
    }
  });
});

describe("HEAD", () => {
  test("HEAD of a GET route answers as the GET would, without a body; HEAD of a POST-only path is a 404", async () => {
    const health = await raw(server.port, http11("HEAD /healthz", "host: localhost"));
    expect(health.status).toBe(200);
    expect(health.headers["content-type"]).toContain("application/json");
    expect(health.body).toBe("");
    const created = await raw(server.port, http11("POST /charges", "host: localhost", ...chargeHeaders(crypto.randomUUID())), '{"amountCents":9}');
    const { id } = JSON.parse(created.body) as { id: string };
    const charge = await raw(server.port, http11(`HEAD /charges/${id}`, "host: localhost", bearer));
    expect(charge.status).toBe(200);
    expect(charge.body).toBe("");
    const anonymous = await raw(server.port, http11(`HEAD /charges/${id}`, "host: localhost"));
    expect(anonymous.status).toBe(401);
    expect((await raw(server.port, http11("HEAD /charges", "host: localhost", bearer))).status).toBe(404);
  });
});

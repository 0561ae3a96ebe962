// The real `bun api.ts` (Elysia on Bun.serve) with requests written on raw sockets, one test
// per way a request arrives that a fetch client would never send: no Host, a one-letter Host,
// HTTP/1.0, HEAD, a 60 kB header, a path with %2F and "..", a POST with no body at all, a 10 MB
// body announced and not sent. Each is answered as the contract says, with a JSON problem where it fails, never
// HTML or a stack trace, and nothing is written that the answer does not name.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { answerWithoutBody, exchange, http10, http11, raw, type RawResponse } from "../testkit/raw-http.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("api_raw");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", ...authEnv() } });
afterAll(async () => {
  await killAll();
  await db.drop();
});

const bearer = `authorization: Bearer ${await tokenFor()}`;
const chargeHeaders = (key: string) => ["content-type: application/json", `idempotency-key: ${key}`, bearer];
// Far over Bun's request-header limit (16 KiB): one header of 60 kB.
const HEADER_BYTES = 60_000;
// Announced, never sent: the server must answer from the announcement alone.
const ANNOUNCED_BYTES = 10 * 1024 * 1024;

async function rows(): Promise<{ charges: number; keys: number }> {
  const [row] = await db.sql<{ charges: number; keys: number }[]>`
    select (select count(*) from charges)::int as charges, (select count(*) from idempotency_keys)::int as keys`;
  return row!;
}

function expectProblem(res: RawResponse, status: number, slug: string): void {
  expect(res.status).toBe(status);
  expect(res.headers["content-type"]).toBe("application/problem+json");
  expect(JSON.parse(res.body)).toMatchObject({ type: `https://charges.example/problems/${slug}`, status });
}

async function create(host: string[], amount: number): Promise<{ id: string }> {
  const res = await raw(api.port, http11("POST /charges", ...host, ...chargeHeaders(crypto.randomUUID())), JSON.stringify({ amountCents: amount }));
  expect(res.status).toBe(201);
  return JSON.parse(res.body) as { id: string };
}

describe("raw requests to bun api.ts", () => {
  test("no Host header: HTTP/1.1 gets Bun's bare 400 (RFC 9112 §3.2), HTTP/1.0 is served", async () => {
    const before = await rows();
    const text = [...http11("POST /charges", ...chargeHeaders(crypto.randomUUID()), "content-length: 19"), "", '{"amountCents":101}'].join("\r\n");
    const answer = await exchange(api.port, text);
    expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 400 Bad Request");
    expect(answer.toLowerCase()).not.toContain("<html");
    expect(await rows()).toEqual(before);
    const health = await raw(api.port, http10("GET /healthz"));
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toEqual({ status: "ok" });
  });

  test("Host: a (shorter than Elysia's path parser skips): every route found", async () => {
    const { id } = await create(["host: a"], 102);
    const got = await raw(api.port, http11(`GET /charges/${id}`, "host: a", bearer));
    expect(got.status).toBe(200);
    expect(JSON.parse(got.body)).toMatchObject({ id, amountCents: 102 });
    expect((await raw(api.port, http11("GET /healthz", "host: a"))).status).toBe(200);
  });

  test("HTTP/1.0 without Host: POST /charges → 201, the connection closed after it", async () => {
    const res = await raw(api.port, http10("POST /charges", ...chargeHeaders(crypto.randomUUID())), '{"amountCents":103}');
    expect(res.status).toBe(201);
    const { id } = JSON.parse(res.body) as { id: string };
    expect(res.headers.location).toBe(`/charges/${id}`);
    const [row] = await db.sql<{ amount_cents: number }[]>`select amount_cents from charges where id = ${id}::uuid`;
    expect(row?.amount_cents).toBe(103);
  });

  test("HEAD: a GET route's status and headers without a body; under /charges the token first", async () => {
    const { id } = await create(["host: localhost"], 104);
    const head = await raw(api.port, http11(`HEAD /charges/${id}`, "host: localhost", bearer));
    expect(head.status).toBe(200);
    expect(head.headers["content-type"]).toContain("application/json");
    expect(head.body).toBe("");
    const anonymous = await raw(api.port, http11(`HEAD /charges/${id}`, "host: localhost"));
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toBe("");
  });

  test("a 60 kB header: Bun's bare 431 before any handler, nothing written", async () => {
    const before = await rows();
    const text = [...http11("POST /charges", "host: localhost", ...chargeHeaders(crypto.randomUUID()), `x-padding: ${"a".repeat(HEADER_BYTES)}`, "content-length: 19"), "", '{"amountCents":105}'].join("\r\n");
    const answer = await exchange(api.port, text);
    expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(answer.toLowerCase()).not.toContain("<html");
    expect(await rows()).toEqual(before);
  });

  test("%2F and '..' in the path: never a route they spell, always a JSON answer", async () => {
    const { id } = await create(["host: localhost"], 106);
    // An encoded slash stays inside its segment: an id that is not a UUID, not a route.
    expectProblem(await raw(api.port, http11("GET /charges/..%2Fhealthz", "host: localhost", bearer)), 400, "invalid-id");
    expectProblem(await raw(api.port, http11(`GET /charges/${id}%2Frefunds`, "host: localhost", bearer)), 400, "invalid-id");
    // Dot segments are resolved as a URL parser does, then the result is routed as itself:
    // out of /charges means no token is asked for, into it means one is.
    const healthz = await raw(api.port, http11("GET /charges/../healthz", "host: localhost"));
    expect(healthz.status).toBe(200);
    expect(JSON.parse(healthz.body)).toEqual({ status: "ok" });
    expectProblem(await raw(api.port, http11(`GET /healthz/../charges/${id}`, "host: localhost")), 401, "unauthorized");
    const got = await raw(api.port, http11(`GET /x/../charges/./${id}`, "host: localhost", bearer));
    expect(got.status).toBe(200);
    expectProblem(await raw(api.port, http11("GET /../../etc/passwd", "host: localhost")), 404, "not-found");
  });

  test("cancel and capture as `curl -X POST` sends them, no body and no Content-Type: done; a body still needs its Content-Type", async () => {
    const authorize = async () => {
      const res = await raw(api.port, http11("POST /charges", "host: localhost", ...chargeHeaders(crypto.randomUUID())), JSON.stringify({ amountCents: 107, capture: "manual" }));
      expect(res.status).toBe(201);
      return (JSON.parse(res.body) as { id: string }).id;
    };
    const bare = (path: string, ...headers: string[]) => http11(`POST ${path}`, "host: localhost", `idempotency-key: ${crypto.randomUUID()}`, bearer, ...headers);
    const canceled = await authorize();
    const cancel = await raw(api.port, bare(`/charges/${canceled}/cancel`));
    expect(cancel.status).toBe(200);
    expect(JSON.parse(cancel.body)).toMatchObject({ id: canceled, status: "canceled" });
    // Content-Length: 0 and a JSON Content-Type with nothing after it are the same empty body.
    const captured = await authorize();
    const capture = await raw(api.port, bare(`/charges/${captured}/capture`, "content-type: application/json", "content-length: 0"));
    expect(capture.status).toBe(200);
    expect(JSON.parse(capture.body)).toMatchObject({ id: captured, status: "succeeded", capturedCents: 107 });
    const [row] = await db.sql<{ status: string }[]>`select status from charges where id = ${canceled}::uuid`;
    expect(row?.status).toBe("canceled");
    // Bytes are a body: without a JSON Content-Type they are refused; POST /charges requires a member.
    const other = await authorize();
    expectProblem(await raw(api.port, bare(`/charges/${other}/cancel`), "{}"), 415, "unsupported-media-type");
    expectProblem(await raw(api.port, bare("/charges")), 415, "unsupported-media-type");
    expectProblem(await raw(api.port, bare("/charges", "content-type: application/json", "content-length: 0")), 400, "invalid-body");
  });

  test("a 10 MB body announced and not sent: 413 at once, nothing written", async () => {
    const before = await rows();
    const head = http11("POST /charges", "host: localhost", ...chargeHeaders(crypto.randomUUID()), `content-length: ${ANNOUNCED_BYTES}`);
    expectProblem(await answerWithoutBody(api.port, head.filter((h) => h !== "connection: close")), 413, "body-too-large");
    expect(await rows()).toEqual(before);
  });
});

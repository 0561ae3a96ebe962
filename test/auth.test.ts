// Bearer JWT on the /charges routes (HS256, AUTH_JWT_SECRET): every refused token is a 401
// problem with the Bearer challenge and writes nothing; the operator endpoints stay open;
// AUTH_MODE=none and a missing key source at start. JWKS tokens: auth-jwks.test.ts.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { CLOCK_TOLERANCE_S } from "../lib/api/auth.ts";
import { createLogger } from "../lib/platform/log.ts";
import { apiTestContext, counts, getCharge, postCharge, startTestApi } from "../testkit/api.ts";
import { mintTestToken, TEST_JWT_SECRET, tokenFor } from "../testkit/auth.ts";
import { runToExit } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("auth");
const ISSUER = "https://issuer.test/";
const AUDIENCE = "charges-api";
const lines: string[] = [];
const strict = await startTestApi(
  db.url,
  { AUTH_ISSUER: ISSUER, AUTH_AUDIENCE: AUDIENCE, LOG_LEVEL: "info" },
  { logger: createLogger("info", "api", (line) => lines.push(line)) },
);
afterAll(() => strict.close());

const body = '{"amountCents":4900}';
const UNAUTHORIZED = "https://charges.example/problems/unauthorized";
const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
const now = () => Math.floor(Date.now() / 1000);

/** POST with `authorization` as the whole header (undefined: none). */
function postWith(target: typeof api, authorization: string | undefined): Promise<Response> {
  return postCharge(target, body, { key: crypto.randomUUID(), tenant: null, headers: authorization === undefined ? {} : { authorization } });
}

async function expect401(res: Response, challenge: string): Promise<void> {
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe(challenge);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  const problem = (await res.json()) as Record<string, unknown>;
  expect(problem).toMatchObject({ type: UNAUTHORIZED, title: "Unauthorized", status: 401 });
  expect(typeof problem.detail).toBe("string");
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
}

describe("refused: 401, the Bearer challenge, nothing written", () => {
  test("no Authorization header → WWW-Authenticate: Bearer, without an error", async () => {
    await expect401(await postWith(api, undefined), "Bearer");
  });

  test("another scheme is no bearer token → the bare challenge too", async () => {
    await expect401(await postWith(api, `Basic ${Buffer.from("a:b").toString("base64")}`), "Bearer");
  });

  test.each([
    ["not a JWT", "Bearer not-a-jwt"],
    ["an empty token", "Bearer "],
    ["two words", "Bearer abc def"],
    ["three dots of garbage", "Bearer a.b.c"],
  ])("malformed: %s → error=\"invalid_token\"", async (_name, header) => {
    await expect401(await postWith(api, header), 'Bearer error="invalid_token"');
  });

  const cases: Array<[string, () => Promise<string>]> = [
    ["signed with another secret", () => mintTestToken({}, "another-secret-of-at-least-32-bytes!!")],
    ["expired beyond the clock tolerance", () => mintTestToken({ ttlSeconds: -(CLOCK_TOLERANCE_S + 60) })],
    ["not valid yet beyond the clock tolerance", () => mintTestToken({ notBeforeSeconds: CLOCK_TOLERANCE_S + 60 })],
    ["alg none (unsigned)", async () => `${base64url({ alg: "none", typ: "JWT" })}.${base64url({ sub: "tenant-a", exp: now() + 600 })}.`],
    ["without exp", async () => unsignedExp()],
    ["without the tenant claim", async () => withoutSub()],
  ];
  test.each(cases)("%s", async (_name, token) => {
    await expect401(await postWith(api, `Bearer ${await token()}`), 'Bearer error="invalid_token"');
  });

  test("with AUTH_ISSUER and AUTH_AUDIENCE: a wrong or missing issuer or audience is refused, the right ones pass", async () => {
    for (const claims of [
      { issuer: "https://elsewhere.test/", audience: AUDIENCE },
      { audience: AUDIENCE },
      { issuer: ISSUER, audience: "another-api" },
      { issuer: ISSUER },
    ]) {
      await expect401(await postWith(strict, `Bearer ${await mintTestToken(claims)}`), 'Bearer error="invalid_token"');
    }
    const good = await postWith(strict, `Bearer ${await mintTestToken({ issuer: ISSUER, audience: AUDIENCE })}`);
    expect(good.status).toBe(201);
    expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  });

  test("GET /charges/:id without a token → 401, with a token of the tenant → 200", async () => {
    const created = (await (await postCharge(api, body, { key: crypto.randomUUID() })).json()) as { id: string };
    const anonymous = await api.fetch(new Request(`http://localhost/charges/${created.id}`));
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("www-authenticate")).toBe("Bearer");
    expect((await getCharge(api, created.id)).status).toBe(200);
  });

  test("a token expired within the clock tolerance is still accepted", async () => {
    const res = await postWith(api, `Bearer ${await mintTestToken({ ttlSeconds: -Math.floor(CLOCK_TOLERANCE_S / 3) })}`);
    expect(res.status).toBe(201);
  });

  test("the scheme is case-insensitive", async () => {
    expect((await postWith(api, `bearer ${await tokenFor()}`)).status).toBe(201);
    expect((await postWith(api, `BEARER  ${await tokenFor()}`)).status).toBe(201);
  });
});

/** A token without exp, properly signed (jose's SignJWT always works from claims we give). */
async function unsignedExp(): Promise<string> {
  const { SignJWT } = await import("jose");
  return new SignJWT({}).setProtectedHeader({ alg: "HS256" }).setSubject("tenant-a").sign(new TextEncoder().encode(TEST_JWT_SECRET));
}

async function withoutSub(): Promise<string> {
  const { SignJWT } = await import("jose");
  return new SignJWT({ tenant: "tenant-a" }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("10m").sign(new TextEncoder().encode(TEST_JWT_SECRET));
}

describe("the rest of the contract", () => {
  test("operator endpoints answer without a token", async () => {
    for (const path of ["/healthz", "/readyz", "/openapi.json"]) {
      const res = await api.fetch(new Request(`http://localhost${path}`));
      expect([path, res.status]).toEqual([path, 200]);
    }
    // No exposition wired in this process: a 404 problem, but no challenge.
    expect((await api.fetch(new Request("http://localhost/metrics"))).status).toBe(404);
  });

  test("the OpenAPI document declares the bearer scheme on the charge routes only", async () => {
    const doc = (await (await api.fetch(new Request("http://localhost/openapi.json"))).json()) as {
      components: { securitySchemes: Record<string, Record<string, string>> };
      paths: Record<string, Record<string, { security?: unknown; responses: Record<string, unknown> }>>;
    };
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer", bearerFormat: "JWT" });
    expect(doc.paths["/charges"]!.post!.security).toEqual([{ bearer: [] }]);
    expect(doc.paths["/charges/{id}"]!.get!.security).toEqual([{ bearer: [] }]);
    expect(doc.paths["/charges"]!.post!.responses["401"]).toBeDefined();
    // The operator's routes say they need none.
    expect(doc.paths["/healthz"]!.get!.security).toEqual([]);
  });

  test("the logs name the tenant and the reason, never the token", async () => {
    const good = await mintTestToken({ issuer: ISSUER, audience: AUDIENCE });
    const bad = await mintTestToken({ issuer: ISSUER, audience: AUDIENCE }, "another-secret-of-at-least-32-bytes!!");
    expect((await postWith(strict, `Bearer ${good}`)).status).toBe(201);
    expect((await postWith(strict, `Bearer ${bad}`)).status).toBe(401);
    // Logged in onAfterResponse, once the answer has left.
    await waitUntil(() => lines.some((l) => l.includes('"authFailure":"signature"')), 5000, "the refused request's log line");
    const text = lines.join("\n");
    for (const token of [good, bad]) {
      for (const part of token.split(".")) expect(text).not.toContain(part);
    }
    const requests = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "request");
    expect(requests.some((l) => l.status === 201 && l.tenant === "tenant-a")).toBe(true);
    expect(requests.some((l) => l.status === 401 && l.authFailure === "signature")).toBe(true);
  });
});

describe("AUTH_MODE", () => {
  test("none: one implicit tenant, no token needed, a warning at start", async () => {
    const warned: string[] = [];
    const open = await startTestApi(db.url, { AUTH_MODE: "none", AUTH_JWT_SECRET: "" }, { logger: createLogger("warn", "api", (l) => warned.push(l)) });
    try {
      const res = await postCharge(open, body, { key: crypto.randomUUID(), tenant: null });
      expect(res.status).toBe(201);
      const [row] = await db.sql<{ tenant: string }[]>`select tenant from charges`;
      expect(row?.tenant).toBe("default");
      expect(warned.some((l) => l.includes("AUTH_MODE=none"))).toBe(true);
    } finally {
      await open.close();
    }
  });

  test("bun api.ts with AUTH_MODE unset and no secret or JWKS: exit 1 with one line naming the way out", async () => {
    const { code, stderr } = await runToExit(["bun", "api.ts"], { AUTH_MODE: "", AUTH_JWT_SECRET: "", AUTH_JWKS_URL: "", DATABASE_URL: db.url, PORT: "0" });
    expect(code).toBe(1);
    const out = stderr.trim().split("\n");
    expect(out).toHaveLength(1);
    for (const name of ["AUTH_JWT_SECRET", "AUTH_JWKS_URL", "AUTH_MODE=none"]) expect(out[0]).toContain(name);
  });

  test("bun api.ts with a short AUTH_JWT_SECRET: exit 1, the length named, the secret never echoed", async () => {
    const secret = "short-secret-xyz";
    const { code, stdout, stderr } = await runToExit(["bun", "api.ts"], { AUTH_JWT_SECRET: secret, DATABASE_URL: db.url, PORT: "0" });
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toEqual([`configuration error: AUTH_JWT_SECRET must be at least 32 bytes, got ${secret.length}`]);
    expect(stdout + stderr).not.toContain(secret);
  });
});

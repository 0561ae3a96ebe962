// A tenant claim is stored with every key, charge and event: one that cannot name a tenant
// (control, format or separator characters, a lone surrogate, longer than MAX_TENANT_CHARS,
// the implicit tenant of AUTH_MODE=none) is a 401 problem with nothing written, never a 500
// from the database refusing the text. A `typ` header other than JWT or at+jwt is refused too.
import { expect, setDefaultTimeout, test } from "bun:test";
import { SignJWT } from "jose";
import { IMPLICIT_TENANT, MAX_TENANT_CHARS } from "../lib/api/auth.ts";
import { createLogger } from "../lib/platform/log.ts";
import { apiTestContext, counts, postCharge, startTestApi } from "../testkit/api.ts";
import { TEST_JWT_SECRET, tokenFor } from "../testkit/auth.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("auth_claims");
const body = JSON.stringify({ amountCents: 4900 });

test.each([
  ["a NUL character", "tenant\u0000a"],
  ["a newline", "tenant\na"],
  ["an escape character", "tenant\u001b[31m"],
  ["DEL", "tenant\u007f"],
  ["a C1 control", "tenant\u0085"],
  ["a lone surrogate", "tenant\ud800"],
  ["one character too long", "t".repeat(MAX_TENANT_CHARS + 1)],
  ["a zero-width space (format)", "tenant\u200ba"],
  ["a zero-width joiner (format)", "tenant\u200d"],
  ["a right-to-left override (format)", "\u202etenant"],
  ["a byte order mark (format)", "\ufefftenant"],
  ["a line separator", "tenant\u2028a"],
  ["a paragraph separator", "tenant\u2029a"],
  ["a no-break space", "tenant\u00a0a"],
  ["a private-use character", "tenant\ue000"],
  ["the implicit tenant of AUTH_MODE=none", IMPLICIT_TENANT],
])("a tenant claim with %s → 401 problem, nothing written", async (_name, tenant) => {
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
  expect(res.status).toBe(401);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/unauthorized", detail: "the token's tenant claim is not an accepted tenant id" });
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
});

test("a refused tenant is never logged: the line names the reason only", async () => {
  const lines: string[] = [];
  const logged = await startTestApi(db.url, { LOG_LEVEL: "info" }, { logger: createLogger("info", "api", (line) => lines.push(line)) });
  try {
    const tenant = "evil\u2028{\"level\":\"error\"}";
    const res = await postCharge(logged, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
    expect(res.status).toBe(401);
    // The request's line is written once the answer has left (onAfterResponse), a turn later.
    await waitUntil(() => lines.some((line) => line.includes('"msg":"request"')), 5000, "the refused request's log line");
    const requests = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === "request");
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatchObject({ status: 401, authFailure: "tenant" });
    expect(lines.join("\n")).not.toContain("evil");
  } finally {
    await logged.close();
  }
});

/** An HS256 token for tenant-a whose protected header says `typ` (undefined: none). */
function tokenTyped(typ: unknown): Promise<string> {
  const header = typ === undefined ? { alg: "HS256" } : { alg: "HS256", typ: typ as string };
  return new SignJWT({}).setProtectedHeader(header).setSubject("tenant-a").setIssuedAt().setExpirationTime("1h").sign(new TextEncoder().encode(TEST_JWT_SECRET));
}

test.each([["JWT"], ["jwt"], ["at+jwt"], ["AT+JWT"], ["application/at+jwt"], [undefined]])("typ %p is served", async (typ) => {
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenTyped(typ)}` } });
  expect(res.status).toBe(201);
});

test.each([["JWS"], ["logout+jwt"], ["id_token+jwt"], ["secevent+jwt"], [""], [42]])("typ %p → 401 problem, nothing written", async (typ) => {
  const before = await counts(db.sql);
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenTyped(typ)}` } });
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect(await res.json()).toMatchObject({ detail: "the token's typ is not JWT or at+jwt" });
  expect(await counts(db.sql)).toEqual(before);
});

test("a tenant of MAX_TENANT_CHARS characters, non-ASCII letters and a surrogate pair included, is served", async () => {
  const tenant = `é😀${"t".repeat(MAX_TENANT_CHARS - 3)}`;
  expect(tenant.length).toBe(MAX_TENANT_CHARS);
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  const [row] = await db.sql<{ tenant: string }[]>`select tenant from charges where id = ${id}`;
  expect(row?.tenant).toBe(tenant);
});

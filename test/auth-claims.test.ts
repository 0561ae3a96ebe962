// A tenant claim is stored with every key, charge and event: one that cannot name a tenant
// (by default anything but printable ASCII without a space at either end; with
// AUTH_TENANT_IDS=unicode, control, format or separator characters, a lone surrogate, a
// compatibility form; longer than MAX_TENANT_CHARS; the implicit tenant of AUTH_MODE=none) is
// a 401 problem with nothing written, never a 500 from the database refusing the text. A `typ`
// header other than JWT or at+jwt is refused too, and so is a time claim that is no time.
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
  ["a trailing space", "acme "],
  ["a leading space", " acme"],
  ["only spaces", " ".repeat(MAX_TENANT_CHARS)],
  ["a Cyrillic а among Latin letters", "\u0430cme"],
  ["full-width letters", "\uff41\uff43\uff4d\uff45"],
  ["a Latin letter with an accent", "\u00e9cole"],
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

test("a tenant of MAX_TENANT_CHARS printable ASCII characters, inner spaces and punctuation included, is served", async () => {
  const tenant = `acme corp/eu-1:${"t".repeat(MAX_TENANT_CHARS - 16)}~`;
  expect(tenant.length).toBe(MAX_TENANT_CHARS);
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
  expect(res.status).toBe(201);
  const { id } = (await res.json()) as { id: string };
  const [row] = await db.sql<{ tenant: string }[]>`select tenant from charges where id = ${id}`;
  expect(row?.tenant).toBe(tenant);
});

test("AUTH_TENANT_IDS=unicode: letters of any script are served; surrounding spaces, compatibility forms and invisible characters are still refused", async () => {
  const wide = await startTestApi(db.url, { AUTH_TENANT_IDS: "unicode" });
  try {
    const post = async (tenant: string) => (await postCharge(wide, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } })).status;
    const tenant = `é😀ж${"t".repeat(MAX_TENANT_CHARS - 4)}`;
    expect(tenant.length).toBe(MAX_TENANT_CHARS);
    expect(await post(tenant)).toBe(201);
    expect(await post("\u0430cme")).toBe(201);
    for (const refused of ["acme ", " acme", "\uff41\uff43\uff4d\uff45", "tenant\u200ba", "tenant\u00a0a", "tenant\u0000a"]) expect([refused, await post(refused)]).toEqual([refused, 401]);
  } finally {
    await wide.close();
  }
});

/** An HS256 token for tenant-a whose payload is `payload` as written (JSON's 1e400 reads as Infinity). */
async function tokenWithPayload(payload: string): Promise<string> {
  const encode = (text: string) => Buffer.from(text).toString("base64url");
  const signed = `${encode('{"alg":"HS256","typ":"JWT"}')}.${encode(payload)}`;
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(TEST_JWT_SECRET), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const signature = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(signed));
  return `${signed}.${Buffer.from(signature).toString("base64url")}`;
}

const NOW_S = Math.floor(Date.now() / 1000);
test.each([
  ["exp 1e400 (Infinity)", `{"sub":"tenant-a","exp":1e400}`],
  ["exp past the year 3000", `{"sub":"tenant-a","exp":${32_503_680_001}}`],
  ["exp a string", `{"sub":"tenant-a","exp":"${NOW_S + 60}"}`],
  ["nbf -1e400 (-Infinity)", `{"sub":"tenant-a","exp":${NOW_S + 60},"nbf":-1e400}`],
  ["iat 1e400", `{"sub":"tenant-a","exp":${NOW_S + 60},"iat":1e400}`],
  ["iat negative", `{"sub":"tenant-a","exp":${NOW_S + 60},"iat":-5}`],
  ["iat an hour ahead", `{"sub":"tenant-a","exp":${NOW_S + 7200},"iat":${NOW_S + 3600}}`],
])("a token with %s → 401, nothing written", async (_name, payload) => {
  const before = await counts(db.sql);
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenWithPayload(payload)}` } });
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect(await counts(db.sql)).toEqual(before);
});

test("a hand-made token with sane times is served (the refusals above are the claims', not the signing's)", async () => {
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenWithPayload(`{"sub":"tenant-a","exp":${NOW_S + 60},"nbf":${NOW_S - 5},"iat":${NOW_S}}`)}` } });
  expect(res.status).toBe(201);
});

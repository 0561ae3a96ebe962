// A tenant claim is stored with every key, charge and event: one that cannot name a tenant
// (control characters, a lone surrogate, longer than MAX_TENANT_CHARS) is a 401 problem with
// nothing written, never a 500 from the database refusing the text.
import { expect, setDefaultTimeout, test } from "bun:test";
import { MAX_TENANT_CHARS } from "../lib/api/auth.ts";
import { apiTestContext, counts, postCharge } from "../testkit/api.ts";
import { tokenFor } from "../testkit/auth.ts";

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
])("a tenant claim with %s → 401 problem, nothing written", async (_name, tenant) => {
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
  expect(res.status).toBe(401);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect(((await res.json()) as { type: string }).type).toBe("https://charges.example/problems/unauthorized");
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
});

test("a tenant of MAX_TENANT_CHARS characters, non-ASCII letters and a surrogate pair included, is served", async () => {
  const tenant = `é😀${"t".repeat(MAX_TENANT_CHARS - 3)}`;
  expect(tenant.length).toBe(MAX_TENANT_CHARS);
  const res = await postCharge(api, body, { key: crypto.randomUUID(), headers: { authorization: `Bearer ${await tokenFor(tenant)}` } });
  expect(res.status).toBe(201);
  const [row] = await db.sql<{ tenant: string }[]>`select tenant from charges`;
  expect(row?.tenant).toBe(tenant);
});

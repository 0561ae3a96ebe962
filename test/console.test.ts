// The operator console without a browser: who may (401 and the sign-in page without a token or
// with a bad one, 403 for a tenant's token on every route, the sign-in link's cookie), the CSRF
// guard and GETs that change nothing, tenant text shown as text, actions that need a reason
// and leave an audit row, find by each kind of id, and the CSV export.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { freshDatabase } from "../testkit/services.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { authEnv, mintTestToken, tokenFor } from "../testkit/auth.ts";
import { runToExit } from "../testkit/processes.ts";
import { OPERATOR_SCOPE } from "../dev/token.ts";
import { banner } from "../dev/output.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("console");
const api = await startTestApi(db.url);
afterAll(async () => {
  await api.close();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges, operator_audit`;
});

const OPERATOR = "ops-alice";
const operatorToken = await mintTestToken({ tenant: OPERATOR, scope: `read ${OPERATOR_SCOPE}` });
const ORIGIN = "http://localhost";

// Every console route, with the method it is served on.
const ROUTES: readonly [string, string][] = [
  ["GET", "/console"], ["GET", "/console/backlog.json"], ["GET", "/console/find?q=x"], ["GET", `/console/charges/${crypto.randomUUID()}`],
  ["GET", "/console/lists/parked-rows"], ["GET", "/console/lists/parked-keys/confirm?action=resolve"], ["GET", "/console/export/parked-rows"],
  ["GET", "/console/audit"], ["POST", "/console/actions"], ["POST", "/console/lists/parked-rows/apply"],
];
const DATA_ROUTES = new Set(["/console/backlog.json", "/console/export/parked-rows"]);

function get(path: string, headers: Record<string, string> = {}): Promise<Response> {
  return api.fetch(new Request(`${ORIGIN}${path}`, { headers }));
}

function post(path: string, form: Record<string, string>, headers: Record<string, string> = {}): Promise<Response> {
  return api.fetch(new Request(`${ORIGIN}${path}`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", ...headers }, body: new URLSearchParams(form).toString() }));
}

/** The cookies the sign-in link sets, as a Cookie header, and the CSRF token among them. */
async function signIn(): Promise<{ cookie: string; csrf: string; setCookies: string[] }> {
  const res = await get(`/console/sign-in?token=${operatorToken}`);
  expect(res.status).toBe(303);
  expect(res.headers.get("location")).toBe("/console");
  const setCookies = res.headers.getSetCookie();
  const cookie = setCookies.map((c) => c.split(";")[0]).join("; ");
  const csrf = decodeURIComponent(/console_csrf=([^;]+)/.exec(cookie)![1]!);
  return { cookie, csrf, setCookies };
}

/** A charge through the API (no processor: one statement) with its outbox row parked as the relay parks one. */
async function parkedCharge(key: string = crypto.randomUUID(), tenant = "tenant-a"): Promise<{ chargeId: string; rowId: string }> {
  const res = await postCharge(api, JSON.stringify({ amountCents: 1200 }), { key, tenant });
  expect(res.status).toBe(201);
  const chargeId = ((await res.json()) as { id: string }).id;
  const [row] = await db.sql<{ id: string }[]>`
    update outbox set parked_at = now(), attempts = 10, last_error = 'broker refused: payload format invalid'
     where aggregate_id = ${chargeId}::uuid returning id::text`;
  return { chargeId, rowId: row!.id };
}

test("without a token, or with a bad one: the sign-in page on HTML routes, 401 on data routes", async () => {
  const forged = await mintTestToken({ tenant: OPERATOR, scope: OPERATOR_SCOPE }, "another-secret-of-at-least-32-bytes-long!!");
  for (const headers of [{}, { authorization: `Bearer ${forged}` }, { cookie: `console_session=${forged}` }, { authorization: "Bearer not-a-jwt" }] as Record<string, string>[]) {
    for (const [method, path] of ROUTES.filter(([m]) => m === "GET")) {
      const res = await get(path, headers);
      expect({ path, status: res.status }).toEqual({ path, status: 401 });
      if (DATA_ROUTES.has(path)) expect(res.headers.get("content-type")).toContain("application/problem+json");
      else expect(await res.text()).toContain("Sign in");
      void method;
    }
  }
});

test("a tenant's token gets 403 on every console route, and cannot sign in", async () => {
  const tenant = await tokenFor("tenant-a");
  for (const [method, path] of ROUTES) {
    for (const headers of [{ authorization: `Bearer ${tenant}` }, { cookie: `console_session=${tenant}` }] as Record<string, string>[]) {
      const res = method === "GET" ? await get(path, headers) : await post(path, {}, headers);
      expect({ path, status: res.status }).toEqual({ path, status: 403 });
    }
  }
  expect((await get(`/console/sign-in?token=${tenant}`)).status).toBe(403);
});

test("the sign-in link sets an HttpOnly, SameSite=Strict session cookie that opens the console", async () => {
  const { cookie, setCookies } = await signIn();
  for (const c of setCookies) expect(c).toMatch(/; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=\d+/);
  const home = await get("/console", { cookie });
  expect(home.status).toBe(200);
  expect(home.headers.get("content-security-policy")).toContain("script-src 'self'");
  expect(await home.text()).toContain(OPERATOR);
  expect((await get("/console/backlog.json", { cookie })).status).toBe(200);
});

test("actions need the page's CSRF token and the console's origin; a GET changes nothing", async () => {
  const { rowId } = await parkedCharge();
  const { cookie, csrf } = await signIn();
  const form = { action: "requeue", target: rowId, reason: "broker fixed", back: "/console" };
  const refused = [
    await post("/console/actions", form, { cookie }),
    await post("/console/actions", { ...form, csrf: "forged" }, { cookie }),
    await post("/console/actions", { ...form, csrf }, { cookie, origin: "https://evil.example" }),
    await post("/console/actions", { ...form, csrf }, { cookie, "sec-fetch-site": "cross-site" }),
    await post("/console/lists/parked-rows/apply", { action: "requeue", reason: "x", csrf: "forged" }, { cookie }),
  ];
  expect(refused.map((r) => r.status)).toEqual([403, 403, 403, 403, 403]);
  // The confirmation page counts; a GET to the action's path is no route.
  expect(await (await get("/console/lists/parked-rows/confirm?action=requeue", { cookie })).text()).toContain("This will requeue <b>1</b> entry");
  expect((await get(`/console/actions?action=requeue&target=${rowId}&reason=x&csrf=${csrf}`, { cookie })).status).toBe(404);
  const [row] = await db.sql<{ parked: boolean }[]>`select parked_at is not null as parked from outbox where id = ${rowId}::uuid`;
  expect(row!.parked).toBe(true);
  expect(await db.sql`select * from operator_audit`).toHaveLength(0);

  const done = await post("/console/actions", { ...form, csrf }, { cookie, origin: ORIGIN });
  expect(done.status).toBe(200);
  const [after] = await db.sql<{ parked: boolean; attempts: number }[]>`select parked_at is not null as parked, attempts from outbox where id = ${rowId}::uuid`;
  expect(after).toEqual({ parked: false, attempts: 0 });
});

test("every action needs a reason, and leaves an audit row: who, what, why, when, what came of it", async () => {
  const { chargeId, rowId } = await parkedCharge();
  const { cookie, csrf } = await signIn();
  const noReason = await post("/console/actions", { action: "discard", target: rowId, reason: "  ", csrf }, { cookie });
  expect(noReason.status).toBe(409);
  expect(await db.sql`select * from operator_audit`).toHaveLength(0);
  const before = Date.now();
  expect((await post("/console/actions", { action: "discard", target: rowId, reason: "poison payload, ticket OPS-7", csrf }, { cookie })).status).toBe(200);
  const audit = await db.sql<{ actor: string; via: string; action: string; target: string; reason: string; outcome: unknown; at: Date }[]>`
    select actor, via, action, target, reason, outcome, at from operator_audit`;
  expect([...audit]).toEqual([{ actor: OPERATOR, via: "console", action: "discard", target: rowId, reason: "poison payload, ticket OPS-7", outcome: { done: true, rows: 1 }, at: expect.any(Date) }]);
  expect(audit[0]!.at.getTime()).toBeGreaterThanOrEqual(before - 1000);
  // Discarded: out of the relay's way, and shown as discarded, never as delivered.
  const page = await (await get(`/console/charges/${chargeId}`, { cookie })).text();
  expect(page).toContain("<td>discarded</td>");
  expect(await (await get("/console/audit", { cookie })).text()).toContain("poison payload, ticket OPS-7");
  // Over a filtered list: each entry its own row.
  const others = [await parkedCharge(), await parkedCharge(undefined, "tenant-b")];
  // The count confirmed must still hold: a stale one shows the new count and does nothing.
  const stale = await post("/console/lists/parked-rows/apply", { action: "requeue", reason: "broker back", tenant: "tenant-b", expected: "2", csrf }, { cookie });
  expect(stale.status).toBe(409);
  expect(await stale.text()).toContain("This will requeue <b>1</b> entry");
  const bulk = await post("/console/lists/parked-rows/apply", { action: "requeue", reason: "broker back", tenant: "tenant-b", expected: "1", csrf }, { cookie });
  expect(await bulk.text()).toContain("1 done, 0 not done, of 1 matched.");
  expect([...(await db.sql`select target from operator_audit where action = 'requeue'`)]).toEqual([{ target: others[1]!.rowId }]);
});

test("what a tenant wrote is shown as text, never markup", async () => {
  const res = await postCharge(api, JSON.stringify({ amountCents: 700 }), { key: "<img/src=x/onerror=alert(1)>", tenant: "tenant-<b>" });
  expect(res.status).toBe(201);
  const chargeId = ((await res.json()) as { id: string }).id;
  // A key cannot hold a space through the API; the row can, and the console must show it as text too.
  await db.sql`update idempotency_keys set key = '"<img src=x onerror=alert(1)>"'`;
  const { cookie } = await signIn();
  const page = await (await get(`/console/charges/${chargeId}`, { cookie })).text();
  expect(page).toContain("&quot;&lt;img src=x onerror=alert(1)&gt;&quot;");
  expect(page).toContain("tenant-&lt;b&gt;");
  expect(page).not.toContain("<img");
  expect(page).not.toContain("<b>\"");
  const found = await get(`/console/find?q=${encodeURIComponent('"<img src=x onerror=alert(1)>"')}&tenant=${encodeURIComponent("tenant-<b>")}`, { cookie });
  expect(found.status).toBe(303);
  expect(found.headers.get("location")).toBe(`/console/charges/${chargeId}`);
});

test("find opens the charge by its key and tenant, its id, its event id and its processor payment id", async () => {
  const key = `order-${crypto.randomUUID()}`;
  const { chargeId, rowId } = await parkedCharge(key);
  await db.sql`update charges set processor_payment_id = 'pi_console_test' where id = ${chargeId}::uuid`;
  const { cookie } = await signIn();
  for (const q of [`q=${key}&tenant=tenant-a`, `q=${key}`, `q=${chargeId}`, `q=${rowId}`, "q=pi_console_test"]) {
    const res = await get(`/console/find?${q}`, { cookie });
    expect({ q, status: res.status, location: res.headers.get("location") }).toEqual({ q, status: 303, location: `/console/charges/${chargeId}` });
  }
  expect((await get(`/console/find?q=${key}&tenant=tenant-b`, { cookie })).status).toBe(404);
});

test("a list exports as CSV, filtered, a spreadsheet formula defused", async () => {
  const a = await parkedCharge();
  await parkedCharge(undefined, "tenant-b");
  await db.sql`update outbox set last_error = '=HYPERLINK("x")' where id = ${a.rowId}::uuid`;
  const { cookie } = await signIn();
  const res = await get("/console/export/parked-rows?tenant=tenant-a", { cookie });
  expect(res.headers.get("content-type")).toBe("text/csv; charset=utf-8");
  const lines = (await res.text()).trimEnd().split("\r\n");
  expect(lines[0]).toBe("id,tenant,aggregateId,sequence,eventType,attempts,lastError,createdAt,parkedAt,blockedBy");
  expect(lines).toHaveLength(2);
  expect(lines[1]).toStartWith(`${a.rowId},tenant-a,${a.chargeId},1,ChargeCreated,10,"'=HYPERLINK(""x"")",`);
});

test("a row held behind a parked one is listed with what blocks it; releasing its aggregate puts the parked one back in line, audited", async () => {
  const { chargeId, rowId } = await parkedCharge();
  // A later event of the same charge, pending: the relay holds it behind the parked one.
  const [held] = await db.sql<{ id: string }[]>`
    insert into outbox (id, tenant, aggregate_id, sequence, event_type, payload)
    values (gen_random_uuid(), 'tenant-a', ${chargeId}::uuid, 2, 'ChargeRefunded', '{}') returning id::text`;
  const { cookie, csrf } = await signIn();
  const list = await (await get("/console/lists/held-rows", { cookie })).text();
  expect(list).toContain(`<td>${held!.id}</td>`);
  expect(list).toContain(`<td>${rowId}</td>`);
  const page = await (await get(`/console/charges/${chargeId}`, { cookie })).text();
  expect(page).toContain("<td>held</td>");
  expect((await post("/console/actions", { action: "release", target: chargeId, reason: "consumer fixed", csrf }, { cookie })).status).toBe(200);
  const rows = await db.sql<{ sequence: number; parked: boolean }[]>`select sequence, parked_at is not null as parked from outbox where aggregate_id = ${chargeId}::uuid order by sequence`;
  expect([...rows]).toEqual([{ sequence: 1, parked: false }, { sequence: 2, parked: false }]);
  expect([...(await db.sql`select action, target from operator_audit`)]).toEqual([{ action: "release", target: chargeId }]);
});

test("stale STARTED keys are listed by their lease, filtered by operation and age", async () => {
  await db.sql`
    insert into idempotency_keys (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_until, resume, created_at)
    values ('tenant-a', 'stale-1', 'POST /charges', 'h', 'STARTED', now() + interval '1 day', 'created', now() - interval '1 minute',
            jsonb_build_object('chargeId', ${crypto.randomUUID()}::text), now() - interval '10 minutes'),
           ('tenant-a', 'live-1', 'POST /charges', 'h', 'STARTED', now() + interval '1 day', 'created', now() + interval '1 minute', '{}', now())`;
  const { cookie } = await signIn();
  const listed = await (await get("/console/lists/stale-keys?operation=POST+/charges&older_than=300", { cookie })).text();
  expect(listed).toContain("<td>stale-1</td>");
  expect(listed).not.toContain("live-1");
  expect(await (await get("/console/lists/stale-keys?older_than=3600", { cookie })).text()).toContain('<span id="total">0</span>');
});

test("with OPERATOR_PORT the console is on the operator listener only, never on the API's port", async () => {
  const split = await startTestApi(db.url, { OPERATOR_PORT: "19399" });
  try {
    const onApi = await split.fetch(new Request(`${ORIGIN}/console`, { headers: { authorization: `Bearer ${operatorToken}` } }));
    expect(onApi.status).toBe(404);
    const onOperator = await split.operatorFetch!(new Request(`${ORIGIN}/console`, { headers: { authorization: `Bearer ${operatorToken}` } }));
    expect(onOperator.status).toBe(200);
    expect(await onOperator.text()).toContain("Needs a person");
  } finally {
    await split.close();
  }
});

test("bun run token --operator mints a token that opens the console; the dev banner prints the sign-in link", async () => {
  const minted = await runToExit(["bun", "run", "--silent", "token", "--operator", "ops-dan"], { ...authEnv(), DATABASE_URL: db.url });
  expect(minted.code).toBe(0);
  const token = minted.stdout.trim();
  const home = await get("/console", { authorization: `Bearer ${token}` });
  expect(home.status).toBe(200);
  expect(await home.text()).toContain("ops-dan");
  // The tenant's token from the same command does not.
  const tenant = (await runToExit(["bun", "run", "--silent", "token", "ops-dan"], { ...authEnv(), DATABASE_URL: db.url })).stdout.trim();
  expect((await get("/console", { authorization: `Bearer ${tenant}` })).status).toBe(403);

  const link = `http://127.0.0.1:3000/console/sign-in?token=${token}`;
  const lines = banner({
    api: "http://127.0.0.1:3000", relay: "http://127.0.0.1:9465", databaseUrl: db.url, databaseNote: "", databaseDirectUrl: undefined,
    mqttUrl: "mqtt://127.0.0.1:1883", mqttNote: "", authorization: undefined, authNote: "", consoleUrl: link,
  });
  expect(lines.find((l) => l.trimStart().startsWith("console"))).toContain(link);
});

test("the sign-in form takes a pasted token from the console's own page only; signing out clears the cookies", async () => {
  const pasted = await post("/console/sign-in", { token: operatorToken }, { origin: ORIGIN });
  expect(pasted.status).toBe(303);
  expect(pasted.headers.getSetCookie().some((c) => c.startsWith("console_session=ey"))).toBe(true);
  const crossSite = await post("/console/sign-in", { token: operatorToken }, { origin: "https://evil.example" });
  expect(crossSite.status).toBe(403);
  expect(crossSite.headers.getSetCookie()).toEqual([]);
  const { cookie, csrf } = await signIn();
  expect((await post("/console/sign-out", { csrf: "forged" }, { cookie })).status).toBe(403);
  const out = await post("/console/sign-out", { csrf }, { cookie, origin: ORIGIN });
  expect(out.status).toBe(303);
  expect(out.headers.getSetCookie().every((c) => c.includes("Max-Age=0"))).toBe(true);
});

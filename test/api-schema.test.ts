// The response schemas are the contract: what POST /charges writes (Charge) and what GET
// /charges/:id writes (ChargeView, the charge with its refunded total), what the service
// checks before answering (checkedJson), and what /openapi.json shows are the same thing.
// Every route's answers, successes and problems, match the schema it declares for their
// status: the handlers answer stored bytes, which Elysia does not check, so this file does.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { apiTestContext, getCharge, postCharge, startTestApi } from "../testkit/api.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import { authHeaders } from "../testkit/auth.ts";
import type { TObject } from "@sinclair/typebox";
import { checkedJson } from "../lib/api/schemas.ts";
import { Charge, ChargeView } from "../lib/charges/charges.ts";
import { MAX_BODY_BYTES } from "../lib/api/body.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api_schema");
const documentOf = async (of: ApiProcess) => (await of.fetch(new Request("http://localhost/openapi.json"))).text();
// Built before any route has answered: Elysia completes a response schema the first time it answers.
const firstDocument = await documentOf(api);

const key = () => crypto.randomUUID();

function expectDocument(schema: TObject, text: string): void {
  const parsed: unknown = JSON.parse(text);
  expect(Value.Check(schema, parsed)).toBe(true);
  // The schema's members in its order; optional ones (the processor's ids) only when they apply.
  expect(Object.keys(parsed as object)).toEqual(Object.keys(schema.properties).filter((name) => name in (parsed as object)));
  expect(Object.keys(parsed as object).length).toBeGreaterThanOrEqual((schema.required ?? []).length);
}

describe("bodies follow Charge and ChargeView", () => {
  test("the 201 and its replay are Charge documents, GET /charges/:id a ChargeView of the same charge", async () => {
    const k = key();
    const created = await (await postCharge(api, '{"amountCents":4900}', { key: k })).text();
    const replayed = await (await postCharge(api, '{"amountCents":4900}', { key: k })).text();
    const { id } = JSON.parse(created) as { id: string };
    const got = await (await getCharge(api, id)).text();
    for (const text of [created, replayed]) expectDocument(Charge, text);
    expectDocument(ChargeView, got);
    expect(replayed).toBe(created);
    // The same charge, nothing of it refunded yet.
    expect(JSON.parse(got)).toEqual({ ...(JSON.parse(created) as object), refundedCents: 0 });
  });

  test("/openapi.json shows the very schemas, and the body limit the server enforces", async () => {
    const doc = (await (await api.fetch(new Request("http://localhost/openapi.json"))).json()) as {
      components: { schemas: { Charge: unknown; ChargeView: unknown } };
      paths: { "/charges": { post: { responses: { "413": { description: string } } } } };
    };
    expect(doc.components.schemas.Charge).toEqual(JSON.parse(JSON.stringify(Charge)));
    expect((doc.components.schemas.Charge as { additionalProperties: boolean }).additionalProperties).toBe(false);
    expect(doc.components.schemas.ChargeView).toEqual(JSON.parse(JSON.stringify(ChargeView)));
    expect((doc.components.schemas.ChargeView as { additionalProperties: boolean }).additionalProperties).toBe(false);
    expect(doc.paths["/charges"].post.responses["413"].description).toContain(String(MAX_BODY_BYTES));
  });
});

describe("checkedJson refuses what the Charge schema refuses", () => {
  const good = { id: "8e03978e-40d5-43e8-bc93-6894a57f9324", amountCents: 1, currency: "usd", status: "succeeded" as const, createdAt: "2026-01-02T03:04:05.678Z" };

  test("a valid charge is written with the schema's properties only, in its order", () => {
    const extra = { createdAt: good.createdAt, status: good.status, currency: "usd", amountCents: 1, id: good.id };
    expect(checkedJson(Charge, extra)).toBe(JSON.stringify(good));
  });

  test.each([
    ["amountCents 0", { ...good, amountCents: 0 }],
    ["a fractional amount", { ...good, amountCents: 1.5 }],
    ["an id that is not a UUID", { ...good, id: "nope" }],
    ["a createdAt that is not an instant", { ...good, createdAt: "yesterday" }],
    ["an extra property", { ...good, secret: "x" }],
  ])("%s throws", (_name, charge) => {
    expect(() => checkedJson(Charge, charge as typeof good)).toThrow(/bug: a response does not match its schema/);
  });
});

describe("every route answers what it declares", () => {
  const withToken = async (method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) =>
    api.fetch(new Request(`http://localhost${path}`, { method, body: init.body, headers: { ...(await authHeaders()), ...init.headers } }));
  const idempotent = (path: string, body: string, k = key()) => withToken("POST", path, { body, headers: { "content-type": "application/json", "idempotency-key": k } });

  /** The route `template` answers `res` with a body its declared schema for that status accepts. */
  async function expectDeclared(method: string, template: string, res: Response): Promise<void> {
    const route = api.routes.find((r) => r.method === method && r.path === template);
    expect(route, `${method} ${template}`).toBeDefined();
    const schema = route!.responses[String(res.status)];
    expect(schema, `${method} ${template} declares ${res.status}`).toBeDefined();
    const text = await res.text();
    const json = (res.headers.get("content-type") ?? "").includes("json");
    const value: unknown = json ? JSON.parse(text) : text;
    const first = Value.Errors(schema!, value).First();
    expect(first === undefined ? "matches" : `${method} ${template} ${res.status}: ${first.path} ${first.message}`).toBe("matches");
  }

  test("the idempotent operations and the reads of what they wrote, each success and each problem", async () => {
    const k = key();
    const created = await idempotent("/charges", '{"amountCents":4900}', k);
    const { id } = (await created.clone().json()) as { id: string };
    await expectDeclared("POST", "/charges", created);
    await expectDeclared("POST", "/charges", await idempotent("/charges", '{"amountCents":4900}', k));
    await expectDeclared("POST", "/charges", await idempotent("/charges", '{"amountCents":5000}', k));
    await expectDeclared("POST", "/charges", await idempotent("/charges", '{"amountCents":"x"}'));
    await expectDeclared("POST", "/charges", await postCharge(api, '{"amountCents":1}', { key: key(), tenant: null }));
    await expectDeclared("POST", "/charges", await idempotent("/charges", "x".repeat(MAX_BODY_BYTES + 1)));
    await expectDeclared("POST", "/charges", await withToken("POST", "/charges", { body: "{}", headers: { "idempotency-key": key(), "content-type": "text/plain" } }));

    await expectDeclared("GET", "/charges/:id", await withToken("GET", `/charges/${id}`));
    await expectDeclared("GET", "/charges/:id", await withToken("GET", `/charges/${crypto.randomUUID()}`));
    await expectDeclared("GET", "/charges/:id", await withToken("GET", "/charges/nope"));
    await expectDeclared("GET", "/charges/:id/events", await withToken("GET", `/charges/${id}/events`));
    await expectDeclared("GET", "/charges/:id/events", await withToken("GET", `/charges/${id}/events?after=x`));
    await expectDeclared("GET", "/charges/idempotency-key", await withToken("GET", "/charges/idempotency-key", { headers: { "idempotency-key": k } }));
    await expectDeclared("GET", "/charges/idempotency-key", await withToken("GET", "/charges/idempotency-key"));

    const refund = await idempotent(`/charges/${id}/refunds`, '{"amountCents":100}');
    const { id: refundId } = (await refund.clone().json()) as { id: string };
    await expectDeclared("POST", "/charges/:id/refunds", refund);
    await expectDeclared("POST", "/charges/:id/refunds", await idempotent(`/charges/${id}/refunds`, '{"amountCents":999999}'));
    await expectDeclared("GET", "/charges/:id/refunds/:refundId", await withToken("GET", `/charges/${id}/refunds/${refundId}`));
    await expectDeclared("GET", "/charges/:id/refunds/:refundId", await withToken("GET", `/charges/${id}/refunds/${crypto.randomUUID()}`));

    for (const action of ["capture", "cancel"]) {
      const manual = (await (await idempotent("/charges", '{"amountCents":700,"capture":"manual"}')).json()) as { id: string };
      await expectDeclared("POST", `/charges/:id/${action}`, await idempotent(`/charges/${manual.id}/${action}`, "{}"));
      await expectDeclared("POST", `/charges/:id/${action}`, await idempotent(`/charges/${manual.id}/${action}`, "{}"));
      await expectDeclared("POST", `/charges/:id/${action}`, await idempotent(`/charges/${crypto.randomUUID()}/${action}`, "{}"));
      await expectDeclared("POST", `/charges/:id/${action}`, await idempotent(`/charges/${id}/${action}`, "{}"));
    }
  });

  test("the operator's routes", async () => {
    for (const path of ["/healthz", "/readyz", "/metrics"]) await expectDeclared("GET", path, await api.fetch(new Request(`http://localhost${path}`)));
  });

  test("/openapi.json is the same document when every route has answered before it is built", async () => {
    const other = await startTestApi(db.url);
    try {
      const { id } = (await (await postCharge(other, '{"amountCents":1}', { key: key() })).json()) as { id: string };
      await db.sql`update outbox set published_at = now()`;
      for (const route of other.routes) {
        const path = route.path.replace(/:[A-Za-z]+/g, id);
        const headers = { ...(await authHeaders()), "content-type": "application/json", "idempotency-key": key() };
        await (await other.fetch(new Request(`http://localhost${path}`, { method: route.method, headers, body: route.method === "POST" ? "{}" : undefined }))).text();
      }
      expect(await documentOf(other)).toBe(firstDocument);
    } finally {
      await other.close();
    }
  });
});

// The Charge schema is the one response schema: what POST and GET write, what the service
// checks before answering, and what /openapi.json shows are the same thing.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { apiTestContext, getCharge, postCharge } from "../testkit/api.ts";
import { Charge, chargeJson } from "../lib/api/schemas.ts";
import { MAX_BODY_BYTES } from "../lib/api/body.ts";

setDefaultTimeout(30_000);

const { api } = await apiTestContext("api_schema");

const key = () => crypto.randomUUID();

function expectCharge(text: string): void {
  const parsed: unknown = JSON.parse(text);
  expect(Value.Check(Charge, parsed)).toBe(true);
  expect(Object.keys(parsed as object)).toEqual(Object.keys(Charge.properties));
}

describe("bodies follow Charge", () => {
  test("the 201, its replay and GET /charges/:id are Charge documents with one and the same content", async () => {
    const k = key();
    const created = await (await postCharge(api, '{"amountCents":4900}', { key: k })).text();
    const replayed = await (await postCharge(api, '{"amountCents":4900}', { key: k })).text();
    const { id } = JSON.parse(created) as { id: string };
    const got = await (await getCharge(api, id)).text();
    for (const text of [created, replayed, got]) expectCharge(text);
    expect(replayed).toBe(created);
    expect(JSON.parse(got)).toEqual(JSON.parse(created));
  });

  test("/openapi.json shows the very schema, and the body limit the server enforces", async () => {
    const doc = (await (await api.fetch(new Request("http://localhost/openapi.json"))).json()) as {
      components: { schemas: { Charge: unknown } };
      paths: { "/charges": { post: { responses: { "413": { description: string } } } } };
    };
    expect(doc.components.schemas.Charge).toEqual(JSON.parse(JSON.stringify(Charge)));
    expect((doc.components.schemas.Charge as { additionalProperties: boolean }).additionalProperties).toBe(false);
    expect(doc.paths["/charges"].post.responses["413"].description).toContain(String(MAX_BODY_BYTES));
  });
});

describe("chargeJson refuses what the schema refuses", () => {
  const good = { id: "8e03978e-40d5-43e8-bc93-6894a57f9324", amountCents: 1, createdAt: "2026-01-02T03:04:05.678Z" };

  test("a valid charge is written with the schema's properties only, in its order", () => {
    const extra = { createdAt: good.createdAt, amountCents: 1, id: good.id };
    expect(chargeJson(extra)).toBe(JSON.stringify(good));
  });

  test.each([
    ["amountCents 0", { ...good, amountCents: 0 }],
    ["a fractional amount", { ...good, amountCents: 1.5 }],
    ["an id that is not a UUID", { ...good, id: "nope" }],
    ["a createdAt that is not an instant", { ...good, createdAt: "yesterday" }],
    ["an extra property", { ...good, secret: "x" }],
  ])("%s throws", (_name, charge) => {
    expect(() => chargeJson(charge as typeof good)).toThrow(/bug: a charge does not match its schema/);
  });
});

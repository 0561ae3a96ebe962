// The client's checked-in types (client/openapi.d.ts) are what openapi-typescript makes of the
// /openapi.json the API serves now: a change to the API's schemas without
// `bun run client:types` fails here. And the client names the API's problem types as it does.
import { expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { PROBLEM, type Charge, type ChargeBody, type ChargeView, type Refund, type RefundBody } from "charges-outbox/client";
import { PROBLEM_BASE, PROBLEMS } from "../lib/api/problem.ts";
import { OPERATIONS } from "../lib/charges/index.ts";
import { CLIENT_TYPES_PATH, servedOpenApi, typesOf } from "../testkit/openapi-types.ts";

// The client takes its types by route and status; were a route or a status to leave the
// document, the type would be never and `bun run typecheck` fails on this line.
type IsNever<T> = [T] extends [never] ? true : false;
const resolved: [IsNever<ChargeBody>, IsNever<Charge>, IsNever<ChargeView>, IsNever<RefundBody>, IsNever<Refund>] = [false, false, false, false, false];
void resolved; // a compile-time check only

setDefaultTimeout(30_000);

test("client/openapi.d.ts is generated from the API's /openapi.json (run `bun run client:types` when this fails)", async () => {
  const generated = await typesOf(await servedOpenApi());
  expect(readFileSync(CLIENT_TYPES_PATH, "utf8")).toBe(generated);
});

test("the generator sees a change in the document: another schema, other types", async () => {
  const document = (await servedOpenApi()) as { components: { schemas: Record<string, { properties?: Record<string, unknown> }> } };
  document.components.schemas.ChargeBody!.properties!.note = { type: "string" };
  expect(await typesOf(document)).not.toBe(readFileSync(CLIENT_TYPES_PATH, "utf8"));
});

test("the client's PROBLEM names every problem type the API answers, under the API's names (add a new one to client/errors.ts)", () => {
  const served = Object.fromEntries(Object.entries<{ slug: string }>(Object.assign({ ...PROBLEMS }, ...OPERATIONS.map((op) => op.problems ?? {}))).map(([name, spec]) => [name, PROBLEM_BASE + spec.slug]));
  expect({ ...PROBLEM } as Record<string, string>).toEqual(served);
});

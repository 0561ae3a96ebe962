// The TypeBox schemas every route shares, and the compiled checks of all of them: the same
// objects validate requests, generate /openapi.json, and check every body the API writes.
import { FormatRegistry, Type as t, type Static, type TSchema } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { isUuid } from "./uuid.ts";

export const MAX_AMOUNT_CENTS = 2_147_483_647; // Postgres integer, the column's type

/** An amount in cents as a request may carry it. */
export const AmountCents = (description: string) => t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS, description });

// What toISOString() writes: the only timestamp spelling the API produces.
const ISO_INSTANT_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const checks = new WeakMap<TSchema, TypeCheck<TSchema>>();

/** The compiled check of `schema`, compiled on first use (or by prepareSchemas). */
export function checkOf<S extends TSchema>(schema: S): TypeCheck<S> {
  let check = checks.get(schema) as TypeCheck<S> | undefined;
  if (check === undefined) {
    registerFormats();
    check = TypeCompiler.Compile(schema);
    checks.set(schema, check);
  }
  return check;
}

// Our formats in TypeBox's process-wide registry, over costlier ones (@elysiajs/openapi's typemap)
// and Elysia's "date-time", which takes any date: checks look formats up on every call.
export function registerFormats(): void {
  FormatRegistry.Set("uuid", isUuid);
  FormatRegistry.Set("date-time", (v) => ISO_INSTANT_RE.test(v));
}

/** Generates the checks now: a runtime that forbids code generation after load (workerd) calls it at load. */
export function prepareSchemas(schemas: readonly TSchema[]): void {
  registerFormats();
  for (const schema of schemas) checkOf(schema);
}

// The JSON of `value`, only the schema's properties in its order, checked against `schema` first:
// a body that disagrees with the documented schema is a bug, so it throws.
export function checkedJson<S extends TSchema & { properties: Record<string, TSchema> }>(schema: S, value: Static<S>): string {
  const check = checkOf(schema);
  if (!check.Check(value)) {
    const first = check.Errors(value).First();
    throw new Error(`bug: a response does not match its schema at ${first?.path || "(root)"}: ${first?.message ?? "unknown"}`);
  }
  return JSON.stringify(value, Object.keys(schema.properties));
}

export const Problem = t.Object(
  {
    type: t.String({ format: "uri" }),
    title: t.String(),
    status: t.Integer(),
    detail: t.String(),
    errors: t.Optional(t.Array(t.Object({ field: t.String(), message: t.String() }))),
  },
  { additionalProperties: true },
);

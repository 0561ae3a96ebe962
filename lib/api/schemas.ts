// The TypeBox schemas: the same objects validate requests, generate /openapi.json, and
// check every charge the API writes before it leaves (chargeJson).
import { FormatRegistry, Type as t, type Static } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { isUuid } from "../shared/uuid.ts";

const MAX_AMOUNT_CENTS = 2_147_483_647; // Postgres integer, the column's type

export const ChargeBody = t.Object(
  { amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS, description: "Amount in cents" }) },
  { additionalProperties: false },
);
export type ChargeBody = Static<typeof ChargeBody>;

// The one response body of POST /charges (201) and GET /charges/:id (200).
export const Charge = t.Object(
  {
    id: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);
export type Charge = Static<typeof Charge>;

// What toISOString() writes: the only createdAt spelling the API produces.
const ISO_INSTANT_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
let chargeCheck: TypeCheck<typeof Charge> | undefined;
let chargeBodyCheck: TypeCheck<typeof ChargeBody> | undefined;

function compileChargeCheck(): TypeCheck<typeof Charge> {
  // TypeBox checks formats through one process-wide registry, which Elysia also fills;
  // whichever registers a format first keeps it.
  if (!FormatRegistry.Has("uuid")) FormatRegistry.Set("uuid", isUuid);
  if (!FormatRegistry.Has("date-time")) FormatRegistry.Set("date-time", (v) => ISO_INSTANT_RE.test(v));
  return TypeCompiler.Compile(Charge);
}

/** Generates the checks now: a runtime that forbids code generation after load (workerd) calls it at load. */
export function prepareSchemas(): void {
  chargeCheck ??= compileChargeCheck();
  chargeBodyCheck ??= TypeCompiler.Compile(ChargeBody);
}

/** The compiled check of a POST /charges body (ChargeBody has no formats to register). */
export function chargeBodyValidator(): TypeCheck<typeof ChargeBody> {
  return (chargeBodyCheck ??= TypeCompiler.Compile(ChargeBody));
}

/**
 * The JSON of a charge, checked against `Charge` first: a body that would disagree with
 * the documented schema is a bug, and it throws before anything is written or answered.
 * Only the schema's properties are written, in the schema's order.
 */
export function chargeJson(charge: Charge): string {
  chargeCheck ??= compileChargeCheck();
  if (!chargeCheck.Check(charge)) {
    const first = chargeCheck.Errors(charge).First();
    throw new Error(`bug: a charge does not match its schema at ${first?.path || "(root)"}: ${first?.message ?? "unknown"}`);
  }
  return JSON.stringify({ id: charge.id, amountCents: charge.amountCents, createdAt: charge.createdAt });
}

export const ChargeParams = t.Object({ id: t.String() });

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

export const IdempotencyKeyHeader = t.String({
  description:
    'An RFC 9651 String of 1-255 visible ASCII characters ("order-12345-payment"), or the same bare (no spaces, quotes, commas or semicolons); a UUID is compared in lowercase, any other key exactly. Unique per tenant.',
});

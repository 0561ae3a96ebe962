// POST /charges on the idempotency core, and GET /charges/:id.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE, CHARGE_CREATED, chargeCreatedPayload } from "../../events.ts";
import type { Sql } from "../../shared/db.ts";
import { boundedStatement } from "../../shared/bounded-statement.ts";
import { chargeProcess } from "../../shared/processor/charge.ts";
import { DEFAULT_SETTINGS, type ForeignDeclaration, type Operation, type OperationInput } from "../core/operation.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../schemas.ts";

const Currency = (description: string) => t.String({ pattern: "^[a-z]{3}$", description });
const PaymentMethod = t.String({ pattern: "^[\\x21-\\x7e]{1,255}$", minLength: 1, maxLength: 255, description: "The processor's payment method id (pm_…); required with PAYMENT_PROCESSOR=stripe" });
const Status = t.Union([t.Literal("pending"), t.Literal("succeeded"), t.Literal("failed")], {
  description: "pending while the processor's outcome is not known; succeeded, or failed (declined)",
});

export const ChargeBody = t.Object(
  {
    amountCents: AmountCents("Amount in cents"),
    currency: t.Optional(Currency("ISO 4217 code in lower case; DEFAULT_CURRENCY (usd) when absent")),
    paymentMethod: t.Optional(PaymentMethod),
  },
  { additionalProperties: false },
);

// The body of POST /charges (201), stored under the key and replayed byte for byte.
export const Charge = t.Object(
  {
    id: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    currency: Currency("ISO 4217, lower case"),
    status: Status,
    processorPaymentId: t.Optional(t.String({ description: "The processor's payment id (PAYMENT_PROCESSOR=stripe)" })),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

// GET /charges/:id: the charge as it is now, with what has been refunded of it.
export const ChargeView = t.Object(
  {
    id: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    currency: Currency("ISO 4217, lower case"),
    status: Status,
    processorPaymentId: t.Optional(t.String({ description: "The processor's payment id, once it succeeded" })),
    declineCode: t.Optional(t.String({ description: "The processor's decline code, when it failed" })),
    refundedCents: t.Integer({ minimum: 0, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

type ChargeColumns = { charge_id: string; amount_cents: number; currency: string; created_at: string; payload: string };
type ChargeInput = OperationInput<Static<typeof ChargeBody>>;

const currencyOf = ({ body, settings }: ChargeInput): string => body.currency ?? (settings ?? DEFAULT_SETTINGS).defaultCurrency;

/**
 * "The same request": the amount, and the currency and payment method when the body names
 * them, so the seed's body {"amountCents": N} has the fingerprint it always had (a key of the
 * previous release replays after an upgrade).
 */
function chargeFingerprint({ body }: ChargeInput): Record<string, string | number> {
  return {
    amountCents: body.amountCents,
    ...(body.currency !== undefined && { currency: body.currency }),
    ...(body.paymentMethod !== undefined && { paymentMethod: body.paymentMethod }),
  };
}

// Through a processor: phase 1 writes the charge pending; the steps and phase 3 are chargeProcess's.
const foreignCharge: ForeignDeclaration<Static<typeof ChargeBody>> = {
  process: chargeProcess,
  columns: { charge_id: "uuid", amount_cents: "int", currency: "text", created_at: "timestamptz" },
  validate: ({ body }) =>
    body.paymentMethod === undefined
      ? { problem: "invalidBody", detail: "paymentMethod: required with a payment processor", extensions: { errors: [{ field: "paymentMethod", message: "required with a payment processor" }] } }
      : undefined,
  prepare(input, traceparent) {
    const chargeId = crypto.randomUUID();
    const currency = currencyOf(input);
    // In the resume too: phase 3 answers with it without reading the charge back.
    const createdAt = new Date().toISOString();
    return {
      columns: { charge_id: chargeId, amount_cents: input.body.amountCents, currency, created_at: createdAt },
      resume: { chargeId, amountCents: input.body.amountCents, currency, paymentMethod: input.body.paymentMethod ?? null, createdAt, traceparent },
    };
  },
  sql: (sql) => ({
    admit: sql`admit as (select l.n, null::text as refusal, null::text as detail, null::jsonb as resume from lock l where l.got)`,
    begin: sql`
      charge as (
        insert into charges (id, tenant, amount_cents, currency, status, created_at)
        select w.charge_id, w.tenant, w.amount_cents, w.currency, 'pending', w.created_at from won w
        returning id
      ),
      begun as (select w.n from won w join charge c on c.id = w.charge_id)`,
  }),
};

export const createCharge: Operation<typeof ChargeBody, ChargeColumns> = {
  name: "createCharge",
  summary: "Create a charge",
  method: "POST",
  path: "/charges",
  uuidParams: [],
  body: ChargeBody,
  response: Charge,
  status: 201,
  columns: { charge_id: "uuid", amount_cents: "int", currency: "text", created_at: "timestamptz", payload: "text" },
  fingerprint: chargeFingerprint,
  prepare(input) {
    const id = crypto.randomUUID();
    const createdAt = new Date().toISOString();
    const { amountCents } = input.body;
    const currency = currencyOf(input);
    return {
      columns: { charge_id: id, amount_cents: amountCents, currency, created_at: createdAt, payload: chargeCreatedPayload({ chargeId: id, amountCents, currency }) },
      body: checkedJson(Charge, { id, amountCents, currency, status: "succeeded", createdAt }),
    };
  },
  // A new charge has nothing to check: every request that got its lock goes ahead. Its event
  // is the charge's first: sequence 1.
  sql: (sql) => ({
    admit: sql`admit as (select l.n, null::text as refusal, null::text as detail from lock l where l.got)`,
    write: sql`
      charge as (
        insert into charges (id, tenant, amount_cents, currency, created_at)
        select w.charge_id, w.tenant, w.amount_cents, w.currency, w.created_at from won w
        returning id
      ),
      events as (
        select w.n, ${CHARGE}::text as aggregate_type, c.id as aggregate_id, 1 as sequence, ${CHARGE_CREATED}::text as event_type, w.payload
          from charge c join won w on w.charge_id = c.id
      )`,
  }),
  refuse: (reason) => {
    throw new Error(`bug: createCharge refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "id")}`,
  refusals: {
    "402": "The payment processor declined the charge (card-declined, with declineCode): stored under the key and replayed",
    "502": "The processor answered with an error: outcome unknown, nothing stored; retry with the same key (Retry-After)",
    "503": "Database unavailable, or the token's signing keys could not be fetched; with a payment processor, also the processor unreachable (outcome unknown, nothing stored; retry with the same key). Retry-After",
    "504": "The processor did not answer in time: outcome unknown, nothing stored; retry with the same key (Retry-After)",
  },
  foreign: foreignCharge,
};

/** A string member of a stored response body (the ids its Location is built from). */
export function idOf(body: string, member: string): string {
  const parsed: unknown = JSON.parse(body);
  const value = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>)[member] : undefined;
  if (typeof value === "string") return value;
  throw new Error(`bug: a stored response has no ${member}`);
}

interface ChargeRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly currency: string;
  readonly status: "pending" | "succeeded" | "failed";
  readonly processor_payment_id: string | null;
  readonly decline_code: string | null;
  readonly refunded_cents: number;
  readonly created_at: Date;
}

/** Another tenant's charge is not found, exactly like an unknown id. */
export async function findCharge(sql: Sql, tenant: string, id: string, endsAt: number): Promise<ChargeRow | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<ChargeRow[]>`
    select id, amount_cents, currency, status, processor_payment_id, decline_code, refunded_cents, created_at
      from charges where id = ${id}::uuid and tenant = ${tenant}`);
  return rows[0];
}

/** GET /charges/:id's body, or undefined when there is no such charge for the tenant. */
export async function chargeView(sql: Sql, tenant: string, id: string, endsAt: number): Promise<string | undefined> {
  const row = await findCharge(sql, tenant, id, endsAt);
  if (!row) return undefined;
  return checkedJson(ChargeView, {
    id: row.id,
    amountCents: row.amount_cents,
    currency: row.currency,
    status: row.status,
    ...(row.processor_payment_id !== null && { processorPaymentId: row.processor_payment_id }),
    ...(row.decline_code !== null && { declineCode: row.decline_code }),
    refundedCents: row.refunded_cents,
    createdAt: row.created_at.toISOString(),
  });
}

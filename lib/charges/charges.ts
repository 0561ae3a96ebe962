// POST /charges declared once: its route, its ledger statement and, through a processor, its
// phase 1 (the charge pending), steps (charge-steps.ts) and phase 3; and GET /charges/:id.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE, CHARGE_CREATED, CHARGE_FAILED, chargeCreatedPayload, chargeFailedPayload } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import { OPERATION_PROBLEMS, problemJson, problemsByName, problemType } from "../idempotency/problem-types.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { ChargeResume, confirm, create, payments, type Payments } from "./charge-steps.ts";
import { DEFAULT_SETTINGS, foreign, PROCESSOR_REFUSALS, type FinalRow, type Operation, type OperationInput } from "../idempotency/model.ts";

const Currency = (description: string) => t.String({ pattern: "^[a-z]{3}$", description });
const PaymentMethod = t.String({ pattern: "^[\\x21-\\x7e]{1,255}$", minLength: 1, maxLength: 255, description: "The processor's payment method id (pm_…); required with PAYMENT_PROCESSOR=stripe" });
// `updating`: the in-flight status of every change of an authorized charge that declares none
// of its own (transition.ts), so that a new change needs no new status.
const STATUSES = ["pending", "authorized", "capturing", "canceling", "updating", "succeeded", "failed", "canceled"] as const;
export type ChargeStatus = (typeof STATUSES)[number];
const Status = t.Union(STATUSES.map((s) => t.Literal(s)), {
  description:
    "pending while the processor's outcome is not known; succeeded, or failed (declined); a manual charge is authorized until captured (succeeded) or canceled, capturing, canceling or updating (another change of it) while the processor's answer is not known",
});
const CapturedCents = t.Optional(t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS, description: "What was captured of a manual charge (the rest was released)" }));

export const ChargeBody = t.Object(
  {
    amountCents: AmountCents("Amount in cents"),
    currency: t.Optional(Currency("ISO 4217 code in lower case; DEFAULT_CURRENCY (usd) when absent")),
    paymentMethod: t.Optional(PaymentMethod),
    capture: t.Optional(
      t.Union([t.Literal("automatic"), t.Literal("manual")], {
        description: "manual: authorize only (status authorized), then POST /charges/:id/capture or /cancel; automatic (the default): captured at once",
      }),
    ),
  },
  { additionalProperties: false },
);

const Id = t.String({ format: "uuid" });
const Cents = t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS });

// POST /charges' body, stored under the key and replayed byte for byte.
export const Charge = t.Object(
  {
    id: Id,
    amountCents: Cents,
    currency: Currency("ISO 4217, lower case"),
    status: Status,
    processorPaymentId: t.Optional(t.String({ description: "The processor's payment id (PAYMENT_PROCESSOR=stripe)" })),
    capturedCents: CapturedCents,
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

export const ChargeView = t.Object(
  {
    id: Id,
    amountCents: Cents,
    currency: Currency("ISO 4217, lower case"),
    status: Status,
    processorPaymentId: t.Optional(t.String({ description: "The processor's payment id, once it succeeded" })),
    declineCode: t.Optional(t.String({ description: "The processor's decline code, when it failed" })),
    capturedCents: CapturedCents,
    refundedCents: t.Integer({ minimum: 0, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

const CARD_DECLINED = problemType("cardDeclined", "card-declined", "Card declined", 402);

function final(outcome: "succeeded" | "refused", resume: ChargeResume): FinalRow {
  const { chargeId, amountCents, currency } = resume;
  const paymentId = resume.paymentId ?? null;
  const common = { chargeId, amountCents, currency };
  if (outcome === "succeeded") {
    const manual = resume.capture === "manual";
    const status = manual ? "authorized" : "succeeded";
    return {
      response: { status: 201, body: checkedJson(Charge, { id: chargeId, amountCents, currency, status, ...(paymentId !== null && { processorPaymentId: paymentId }), createdAt: resume.createdAt }) },
      columns: { charge_id: chargeId, charge_status: status, payment_id: paymentId, decline_code: null, event_type: CHARGE_CREATED, payload: chargeCreatedPayload({ ...common, ...(manual && { status: "authorized" as const }) }) },
    };
  }
  const declineCode = resume.declineCode ?? "declined";
  const failed = { ...common, declineCode };
  return {
    response: { status: CARD_DECLINED.status, body: problemJson(CARD_DECLINED, `the payment processor declined the charge (${declineCode})`, failed) },
    columns: { charge_id: chargeId, charge_status: "failed", payment_id: paymentId, decline_code: declineCode, event_type: CHARGE_FAILED, payload: chargeFailedPayload(failed) },
  };
}

type ChargeColumns = { charge_id: string; amount_cents: number; currency: string; status: string; created_at: string; payload: string };
type ChargeInput = OperationInput<Static<typeof ChargeBody>>;

const currencyOf = ({ body, settings }: ChargeInput): string => body.currency ?? (settings ?? DEFAULT_SETTINGS).defaultCurrency;

export const createCharge: Operation<typeof ChargeBody, ChargeColumns> = {
  name: "createCharge",
  summary: "Create a charge",
  method: "POST",
  path: "/charges",
  uuidParams: [],
  body: ChargeBody,
  response: Charge,
  status: 201,
  columns: { charge_id: "uuid", amount_cents: "int", currency: "text", status: "text", created_at: "timestamptz", payload: "text" },
  // Currency and payment method count only when the body names them, so a body of amountCents
  // alone keeps the fingerprint its stored keys hold, and they replay across an upgrade.
  fingerprint: ({ body }) => ({
    amountCents: body.amountCents,
    ...(body.currency !== undefined && { currency: body.currency }),
    ...(body.paymentMethod !== undefined && { paymentMethod: body.paymentMethod }),
    // Only when manual: "automatic" is the default, and the same request as none.
    ...(body.capture === "manual" && { capture: "manual" }),
  }),
  prepare(input) {
    const id = crypto.randomUUID();
    const createdAt = new Date().toISOString();
    const { amountCents } = input.body;
    const currency = currencyOf(input);
    const manual = input.body.capture === "manual";
    const status = manual ? "authorized" : "succeeded";
    const data = { chargeId: id, amountCents, currency, ...(manual && { status: "authorized" as const }) };
    return {
      columns: { charge_id: id, amount_cents: amountCents, currency, status, created_at: createdAt, payload: chargeCreatedPayload(data) },
      body: checkedJson(Charge, { id, amountCents, currency, status, createdAt }),
    };
  },
  // A new charge has nothing to check. In the ledger it succeeds at once (its event is
  // sequence 1); through the processor it is pending until phase 3.
  sql: (sql, mode) => ({
    admit: sql`admit as (select l.n, null::text as refusal, null::text as detail, null::jsonb as resume, null::text as answer from lock l where l.got)`,
    write:
      mode === "ledger"
        ? sql`
      charge as (
        insert into charges (id, tenant, amount_cents, currency, status, created_at)
        select w.charge_id, w.tenant, w.amount_cents, w.currency, w.status, w.created_at from won w
        returning id
      ),
      events as (
        select w.n, ${CHARGE}::text as aggregate_type, c.id as aggregate_id, 1 as sequence, ${CHARGE_CREATED}::text as event_type, w.payload
          from charge c join won w on w.charge_id = c.id
      )`
        : sql`
      charge as (
        insert into charges (id, tenant, amount_cents, currency, status, created_at)
        select w.charge_id, w.tenant, w.amount_cents, w.currency, 'pending', w.created_at from won w
        returning id
      ),
      begun as (select w.n from won w join charge c on c.id = w.charge_id)`,
  }),
  refuse: (reason) => {
    throw new Error(`bug: createCharge refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "id")}`,
  problems: problemsByName([CARD_DECLINED]),
  refusals: {
    "402": "The payment processor declined the charge (card-declined, with declineCode): stored under the key and replayed",
    ...PROCESSOR_REFUSALS,
  },
  foreign: foreign<Static<typeof ChargeBody>, ChargeResume, Payments>({
    columns: { charge_id: "uuid", amount_cents: "int", currency: "text", created_at: "timestamptz" },
    validate: ({ body }) =>
      body.paymentMethod === undefined
        ? { problem: OPERATION_PROBLEMS.invalidBody, detail: "paymentMethod: required with a payment processor", extensions: { errors: [{ field: "paymentMethod", message: "required with a payment processor" }] } }
        : undefined,
    prepare(input, traceparent) {
      const chargeId = crypto.randomUUID();
      const currency = currencyOf(input);
      // In the resume too: phase 3 answers with it without reading the charge back.
      const createdAt = new Date().toISOString();
      return {
        columns: { charge_id: chargeId, amount_cents: input.body.amountCents, currency, created_at: createdAt },
        resume: { chargeId, amountCents: input.body.amountCents, currency, paymentMethod: input.body.paymentMethod, createdAt, traceparent, ...(input.body.capture === "manual" && { capture: "manual" as const }) },
      };
    },
    resume: ChargeResume,
    operatorIds: ["chargeId", "paymentId"],
    resolution: { succeeded: "paymentId", refused: "declineCode" },
    capabilities: payments,
    firstPoint: "begun",
    steps: { begun: create, created: confirm },
    final,
    // Each completed key's pending charge made final, with its first event (sequence 1).
    finishSql: (sql: Sql) => ({
      columns: { charge_id: "uuid", charge_status: "text", payment_id: "text", decline_code: "text", event_type: "text", payload: "text" },
      write: sql`
      charge as (
        update charges c
           set status = w.charge_status, processor_payment_id = w.payment_id, decline_code = w.decline_code
          from won w
         where c.id = w.charge_id and c.tenant = w.tenant and c.status = 'pending'
        returning w.n
      ),
      events as (
        select w.n, ${CHARGE}::text as aggregate_type, w.charge_id as aggregate_id, 1 as sequence, w.event_type, w.payload
          from won w join charge c on c.n = w.n
      )`,
    }),
  }),
};

/** A string member of a stored response body (the ids its Location is built from). */
export function idOf(body: string, member: string): string {
  const value = (JSON.parse(body) as Readonly<Record<string, unknown>> | null)?.[member];
  if (typeof value === "string") return value;
  throw new Error(`bug: a stored response has no ${member}`);
}

interface ChargeRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly currency: string;
  readonly status: ChargeStatus;
  readonly processor_payment_id: string | null;
  readonly decline_code: string | null;
  readonly captured_cents: number | null;
  readonly refunded_cents: number;
  readonly created_at: Date;
}

/** GET /charges/:id's body; undefined for an unknown id or another tenant's charge alike. */
export async function chargeView(sql: Sql, tenant: string, id: string, endsAt: number): Promise<string | undefined> {
  const [row] = await boundedStatement(sql, endsAt, (q) => q<ChargeRow[]>`
    select id, amount_cents, currency, status, processor_payment_id, decline_code, captured_cents, refunded_cents, created_at
      from charges where id = ${id}::uuid and tenant = ${tenant}`);
  if (!row) return undefined;
  return checkedJson(ChargeView, {
    id: row.id,
    amountCents: row.amount_cents,
    currency: row.currency,
    status: row.status,
    ...(row.processor_payment_id !== null && { processorPaymentId: row.processor_payment_id }),
    ...(row.decline_code !== null && { declineCode: row.decline_code }),
    ...(row.captured_cents !== null && { capturedCents: row.captured_cents }),
    refundedCents: row.refunded_cents,
    createdAt: row.created_at.toISOString(),
  });
}

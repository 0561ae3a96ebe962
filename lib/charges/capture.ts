// POST /charges/:id/capture, declared once: a manual charge ("capture": "manual", authorized)
// captured, all of it or `amountCents` of it (the rest released, as Stripe does): 200 with the
// charge `succeeded` and its `capturedCents`, and ChargeCaptured at the charge's next sequence.
//
// Ledger: one statement. Through the processor: phase 1 marks the charge `capturing` (so a
// second capture or a cancel of it is refused meanwhile); the step captures its PaymentIntent
// under `<charge id>:capture:<attempt>`: the processor captures a payment once, so an attempt
// after a stored 5xx may take a new key, and a resumed step reads the payment first (Stripe
// replays a stored 500 under its key: reading is how a lost answer is learnt). Phase 3 writes
// the charge `succeeded` with what the processor captured, or back to `authorized` with the
// processor's refusal stored as a problem.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE_CAPTURED } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import { OPERATION_PROBLEMS, problemJson, type ProblemSpec } from "../idempotency/problem-types.ts";
import { mapCall, type CallResult, type ProcessorAdapter } from "./processor.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { paymentView, payments, type PaymentView } from "./charge-steps.ts";
import { Charge, chargeAnswerSql } from "./charges.ts";
import { admitOnCharge, chargeChange, type ChargeChange } from "./existing-charge.ts";
import { foreign, PROCESSOR_REFUSALS, type FinalRow, type Operation, type StepContext, type StepResult } from "../idempotency/model.ts";
import { changePayment } from "./payment-change.ts";
import { idOf } from "./steps.ts";

export const CaptureBody = t.Object(
  { amountCents: t.Optional(AmountCents("What to capture, in cents, up to the authorized amount (the rest is released); all of it when absent")) },
  { additionalProperties: false },
);

// The operation's own problem types (README, "Problem types").
const NOT_CAPTURABLE: ProblemSpec = { slug: "charge-not-capturable", title: "Charge not capturable", status: 422 };
const EXCEEDS_AUTHORIZED: ProblemSpec = { slug: "capture-exceeds-authorized", title: "Capture exceeds the authorized amount", status: 422 };
const CAPTURE_REFUSED: ProblemSpec = { slug: "capture-refused", title: "Capture refused by the payment processor", status: 422 };

// admit's refusals.
const CHARGE_NOT_FOUND = "charge_not_found";
const NOT_AUTHORIZED = "charge_not_capturable";
const NOT_AT_PROCESSOR = "charge_not_at_processor";
const TOO_MUCH = "capture_exceeds_authorized";

const CaptureResume = t.Object({
  chargeId: t.String({ format: "uuid" }),
  /** The amount asked for; null: all that is capturable. */
  amountCents: t.Union([t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }), t.Null()]),
  traceparent: t.Union([t.String(), t.Null()]),
  // From the charge, by phase 1's admit.
  paymentId: t.String(),
  authorizedCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  currency: t.String(),
  createdAt: t.String(),
  // What the processor said.
  captureAttempt: t.Optional(t.Integer({ minimum: 0 })),
  capturedCents: t.Optional(t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS })),
  failureCode: t.Optional(t.String()),
  resolvedBy: t.Optional(t.String()),
});
type CaptureResume = Static<typeof CaptureResume>;

/** The PaymentIntent calls a capture makes. */
const captures = (p: ProcessorAdapter) => ({
  capture: (r: CaptureResume, key: string): Promise<CallResult<PaymentView>> =>
    mapCall(p.call("POST", (api) => api.paymentIntents.capture(r.paymentId, r.amountCents === null ? {} : { amount_to_capture: r.amountCents }, { idempotencyKey: key })), paymentView),
  retrieve: payments(p).retrieve,
});
type Step = (ctx: StepContext<CaptureResume, ReturnType<typeof captures>>) => Promise<StepResult<CaptureResume>>;

const capture: Step = ({ resume, processor, resumed }) =>
  changePayment({
    resume,
    resumed,
    attemptName: "captureAttempt",
    send: (attempt) => processor.capture(resume, `${resume.chargeId}:capture:${attempt}`),
    read: () => processor.retrieve(resume.paymentId),
    decide: fromPayment,
  });

function fromPayment(payment: PaymentView, resume: CaptureResume): StepResult<CaptureResume> | undefined {
  if (payment.status === "succeeded") return { kind: "final", outcome: "succeeded", resume: { ...resume, capturedCents: payment.amountReceived } };
  if (payment.status === "canceled") return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: "canceled" } };
  return undefined;
}

function final(outcome: "succeeded" | "refused", resume: CaptureResume): FinalRow {
  const { chargeId } = resume;
  if (outcome === "succeeded") {
    const capturedCents = resume.capturedCents ?? resume.amountCents ?? resume.authorizedCents;
    const body = checkedJson(Charge, { id: chargeId, amountCents: resume.authorizedCents, currency: resume.currency, status: "succeeded", processorPaymentId: resume.paymentId, capturedCents, createdAt: resume.createdAt });
    return { response: { status: 200, body }, columns: { charge_id: chargeId, succeeded: true, captured_cents: capturedCents } };
  }
  const failureCode = resume.failureCode ?? "refused";
  return {
    response: { status: CAPTURE_REFUSED.status, body: problemJson(CAPTURE_REFUSED, `the payment processor refused the capture (${failureCode})`, { chargeId, failureCode }) },
    columns: { charge_id: chargeId, succeeded: false, captured_cents: null },
  };
}

/** A capture as its statements write it (chargeChange): the charge succeeded with what was captured, and ChargeCaptured. */
const captured = (sql: Sql): ChargeChange => ({
  during: sql`'capturing'`,
  done: sql`'succeeded'`,
  also: { column: sql`captured_cents`, ledger: sql`coalesce(w.amount_cents, c.amount_cents)`, finish: sql`w.captured_cents` },
  eventType: CHARGE_CAPTURED,
  payload: sql`json_build_object('chargeId', p.id, 'capturedCents', p.captured_cents)::text`,
});

/** The charge id of the route, lowercased: a UUID's case never makes another charge or another fingerprint. */
const chargeIdOf = (params: Readonly<Record<string, string>>): string => params.id!.toLowerCase();

export const captureCharge: Operation<typeof CaptureBody, { charge_id: string; amount_cents: number | null }> = {
  name: "captureCharge",
  summary: "Capture an authorized charge",
  method: "POST",
  path: "/charges/:id/capture",
  uuidParams: ["id"],
  body: CaptureBody,
  response: Charge,
  status: 200,
  columns: { charge_id: "uuid", amount_cents: "int" },
  fingerprint: ({ params, body }) => ({ chargeId: chargeIdOf(params), ...(body.amountCents !== undefined && { amountCents: body.amountCents }) }),
  prepare: ({ params, body }) => ({
    columns: { charge_id: chargeIdOf(params), amount_cents: body.amountCents ?? null },
    // The answer is the charge, made by the admit from its row.
    body: "",
    exclusive: chargeIdOf(params),
  }),
  // The charge locked (one row per request; a statement holds one request per charge) and read
  // as committed now. Only an authorized charge is captured, up to its amount.
  sql: (sql, mode) => ({
    admit: admitOnCharge(
      sql,
      sql`c.id, c.tenant, c.status, c.amount_cents, c.currency, c.processor_payment_id, c.created_at`,
      sql`case when t.id is null then ${CHARGE_NOT_FOUND}::text
                    when t.status <> 'authorized' then ${NOT_AUTHORIZED}::text
                    when ${mode === "processor"} and t.processor_payment_id is null then ${NOT_AT_PROCESSOR}::text
                    when r.amount_cents > t.amount_cents then ${TOO_MUCH}::text end as refusal,
               case when t.status <> 'authorized' then t.status else t.amount_cents::text end as detail,
               jsonb_build_object('paymentId', t.processor_payment_id, 'authorizedCents', t.amount_cents, 'currency', t.currency,
                                  'createdAt', to_char(t.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) as resume,
               ${chargeAnswerSql(sql, "succeeded", sql`coalesce(r.amount_cents, t.amount_cents)`)} as answer`,
    ),
    // Ledger: the charge succeeded and ChargeCaptured; phase 1: the charge capturing.
    write: chargeChange(sql, captured(sql), mode),
  }),
  refuse(reason, detail, { params }) {
    const chargeId = chargeIdOf(params);
    if (reason === CHARGE_NOT_FOUND) return { problem: OPERATION_PROBLEMS.notFound, detail: `no charge with id ${chargeId}` };
    if (reason === NOT_AUTHORIZED) return { problem: NOT_CAPTURABLE, detail: `charge ${chargeId} is ${detail}: only an authorized charge (capture: manual) can be captured`, extensions: { chargeStatus: detail } };
    if (reason === NOT_AT_PROCESSOR) return { problem: NOT_CAPTURABLE, detail: `charge ${chargeId} was authorized without the payment processor: it has no payment there to capture` };
    if (reason === TOO_MUCH) return { problem: EXCEEDS_AUTHORIZED, detail: `charge ${chargeId} has ${detail} cents authorized`, extensions: { authorizedCents: Number(detail) } };
    throw new Error(`bug: captureCharge refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "id")}`,
  problems: { chargeNotCapturable: NOT_CAPTURABLE, captureExceedsAuthorized: EXCEEDS_AUTHORIZED, captureRefused: CAPTURE_REFUSED },
  refusals: {
    "404": "Unknown charge, or another tenant's; the key stays unused",
    "422": "The key was used with another request (idempotency-key-reused), the charge is not authorized (charge-not-capturable: captured, canceled, failed, or captured at once), or the amount is more than authorized (capture-exceeds-authorized); the key stays unused for the latter two. With a processor, also its refusal (capture-refused), stored under the key",
    ...PROCESSOR_REFUSALS,
  },
  foreign: foreign<Static<typeof CaptureBody>, CaptureResume, ReturnType<typeof captures>>({
    columns: { charge_id: "uuid", amount_cents: "int" },
    validate: () => undefined,
    prepare: ({ params, body }, traceparent) => ({
      columns: { charge_id: chargeIdOf(params), amount_cents: body.amountCents ?? null },
      resume: { chargeId: chargeIdOf(params), amountCents: body.amountCents ?? null, traceparent },
      exclusive: chargeIdOf(params),
    }),
    resume: CaptureResume,
    operatorIds: ["chargeId", "paymentId"],
    resolution: { succeeded: "paymentId", refused: "failureCode" },
    capabilities: captures,
    firstPoint: "begun",
    steps: { begun: capture },
    final,
    // The capturing charge made succeeded (with ChargeCaptured at its next sequence) or authorized again.
    finishSql: (sql: Sql) => ({
      columns: { charge_id: "uuid", succeeded: "boolean", captured_cents: "int" },
      write: chargeChange(sql, captured(sql), "finish"),
    }),
    exclusive: (resume) => resume.chargeId,
  }),
};

// POST /charges/:id/cancel, declared once: a manual charge ("capture": "manual", authorized)
// canceled, its authorization released: 200 with the charge `canceled`, and ChargeCanceled at
// the charge's next sequence.
//
// Ledger: one statement. Through the processor: phase 1 marks the charge `canceling` (a
// capture of it is refused meanwhile); the step cancels its PaymentIntent under
// `<charge id>:cancel:<attempt>` (the processor cancels a payment once, so an attempt after a
// stored 5xx may take a new key), reading the payment first on a resume; phase 3 writes the
// charge `canceled`, or back to `authorized` with the processor's refusal stored.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE_CANCELED } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import { OPERATION_PROBLEMS, problemJson, type ProblemSpec } from "../idempotency/problem-types.ts";
import { mapCall, type CallResult, type ProcessorAdapter } from "./processor.ts";
import { checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { paymentView, payments, type PaymentView } from "./charge-steps.ts";
import { Charge, chargeAnswerSql } from "./charges.ts";
import { admitOnCharge, chargeChange, type ChargeChange } from "./existing-charge.ts";
import { foreign, PROCESSOR_REFUSALS, type FinalRow, type Operation, type StepContext, type StepResult } from "../idempotency/model.ts";
import { changePayment } from "./payment-change.ts";
import { idOf } from "./steps.ts";

export const CancelBody = t.Object({}, { additionalProperties: false, description: "Nothing: {}" });

const NOT_CANCELABLE: ProblemSpec = { slug: "charge-not-cancelable", title: "Charge not cancelable", status: 422 };
const CANCEL_REFUSED: ProblemSpec = { slug: "cancel-refused", title: "Cancel refused by the payment processor", status: 422 };

const CHARGE_NOT_FOUND = "charge_not_found";
const NOT_AUTHORIZED = "charge_not_cancelable";
const NOT_AT_PROCESSOR = "charge_not_at_processor";

const CancelResume = t.Object({
  chargeId: t.String({ format: "uuid" }),
  traceparent: t.Union([t.String(), t.Null()]),
  // From the charge, by phase 1's admit.
  paymentId: t.String(),
  authorizedCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  currency: t.String(),
  createdAt: t.String(),
  cancelAttempt: t.Optional(t.Integer({ minimum: 0 })),
  failureCode: t.Optional(t.String()),
  resolvedBy: t.Optional(t.String()),
});
type CancelResume = Static<typeof CancelResume>;

/** The PaymentIntent calls a cancel makes. */
const cancels = (p: ProcessorAdapter) => ({
  cancel: (id: string, key: string): Promise<CallResult<PaymentView>> => mapCall(p.call("POST", (api) => api.paymentIntents.cancel(id, {}, { idempotencyKey: key })), paymentView),
  retrieve: payments(p).retrieve,
});
type Step = (ctx: StepContext<CancelResume, ReturnType<typeof cancels>>) => Promise<StepResult<CancelResume>>;

const cancel: Step = ({ resume, processor, resumed }) =>
  changePayment({
    resume,
    resumed,
    attemptName: "cancelAttempt",
    send: (attempt) => processor.cancel(resume.paymentId, `${resume.chargeId}:cancel:${attempt}`),
    read: () => processor.retrieve(resume.paymentId),
    decide: fromPayment,
  });

function fromPayment(payment: PaymentView, resume: CancelResume): StepResult<CancelResume> | undefined {
  if (payment.status === "canceled") return { kind: "final", outcome: "succeeded", resume };
  if (payment.status === "succeeded") return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: "already_captured" } };
  return undefined;
}

function final(outcome: "succeeded" | "refused", resume: CancelResume): FinalRow {
  const { chargeId } = resume;
  if (outcome === "succeeded") {
    const body = checkedJson(Charge, { id: chargeId, amountCents: resume.authorizedCents, currency: resume.currency, status: "canceled", processorPaymentId: resume.paymentId, createdAt: resume.createdAt });
    return { response: { status: 200, body }, columns: { charge_id: chargeId, succeeded: true } };
  }
  const failureCode = resume.failureCode ?? "refused";
  return {
    response: { status: CANCEL_REFUSED.status, body: problemJson(CANCEL_REFUSED, `the payment processor refused the cancel (${failureCode})`, { chargeId, failureCode }) },
    columns: { charge_id: chargeId, succeeded: false },
  };
}

/** A cancel as its statements write it (chargeChange): the charge canceled, and ChargeCanceled. */
const canceled = (sql: Sql): ChargeChange => ({
  during: sql`'canceling'`,
  done: sql`'canceled'`,
  eventType: CHARGE_CANCELED,
  payload: sql`json_build_object('chargeId', p.id)::text`,
});

const chargeIdOf = (params: Readonly<Record<string, string>>): string => params.id!.toLowerCase();

export const cancelCharge: Operation<typeof CancelBody, { charge_id: string }> = {
  name: "cancelCharge",
  summary: "Cancel an authorized charge",
  method: "POST",
  path: "/charges/:id/cancel",
  uuidParams: ["id"],
  body: CancelBody,
  response: Charge,
  status: 200,
  columns: { charge_id: "uuid" },
  fingerprint: ({ params }) => ({ chargeId: chargeIdOf(params) }),
  // The answer is the charge, made by the admit from its row.
  prepare: ({ params }) => ({ columns: { charge_id: chargeIdOf(params) }, body: "", exclusive: chargeIdOf(params) }),
  // The charge locked and read as committed now: only an authorized charge is canceled.
  sql: (sql, mode) => ({
    admit: admitOnCharge(
      sql,
      sql`c.id, c.tenant, c.status, c.amount_cents, c.currency, c.processor_payment_id, c.created_at`,
      sql`case when t.id is null then ${CHARGE_NOT_FOUND}::text
                    when t.status <> 'authorized' then ${NOT_AUTHORIZED}::text
                    when ${mode === "processor"} and t.processor_payment_id is null then ${NOT_AT_PROCESSOR}::text end as refusal,
               t.status as detail,
               jsonb_build_object('paymentId', t.processor_payment_id, 'authorizedCents', t.amount_cents, 'currency', t.currency,
                                  'createdAt', to_char(t.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) as resume,
               ${chargeAnswerSql(sql, "canceled", null)} as answer`,
    ),
    // Ledger: the charge canceled and ChargeCanceled; phase 1: the charge canceling.
    write: chargeChange(sql, canceled(sql), mode),
  }),
  refuse(reason, detail, { params }) {
    const chargeId = chargeIdOf(params);
    if (reason === CHARGE_NOT_FOUND) return { problem: OPERATION_PROBLEMS.notFound, detail: `no charge with id ${chargeId}` };
    if (reason === NOT_AUTHORIZED) return { problem: NOT_CANCELABLE, detail: `charge ${chargeId} is ${detail}: only an authorized charge (capture: manual) can be canceled`, extensions: { chargeStatus: detail } };
    if (reason === NOT_AT_PROCESSOR) return { problem: NOT_CANCELABLE, detail: `charge ${chargeId} was authorized without the payment processor: it has no payment there to cancel` };
    throw new Error(`bug: cancelCharge refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "id")}`,
  problems: { chargeNotCancelable: NOT_CANCELABLE, cancelRefused: CANCEL_REFUSED },
  refusals: {
    "404": "Unknown charge, or another tenant's; the key stays unused",
    "422": "The key was used with another request (idempotency-key-reused), or the charge is not authorized (charge-not-cancelable: captured, canceled, failed, or captured at once; the key stays unused). With a processor, also its refusal (cancel-refused), stored under the key",
    ...PROCESSOR_REFUSALS,
  },
  foreign: foreign<Static<typeof CancelBody>, CancelResume, ReturnType<typeof cancels>>({
    columns: { charge_id: "uuid" },
    validate: () => undefined,
    prepare: ({ params }, traceparent) => ({ columns: { charge_id: chargeIdOf(params) }, resume: { chargeId: chargeIdOf(params), traceparent }, exclusive: chargeIdOf(params) }),
    resume: CancelResume,
    operatorIds: ["chargeId", "paymentId"],
    resolution: { succeeded: "paymentId", refused: "failureCode" },
    capabilities: cancels,
    firstPoint: "begun",
    steps: { begun: cancel },
    final,
    // The canceling charge made canceled (with ChargeCanceled at its next sequence) or authorized again.
    finishSql: (sql: Sql) => ({
      columns: { charge_id: "uuid", succeeded: "boolean" },
      write: chargeChange(sql, canceled(sql), "finish"),
    }),
    exclusive: (resume) => resume.chargeId,
  }),
};

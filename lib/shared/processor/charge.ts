// POST /charges through the payment processor: its foreign steps and phase 3. Phase 1 (the
// key STARTED, the charge pending) is the API's (lib/api/operations/charges.ts); it writes
// into the key's resume what these steps need: chargeId, amountCents, currency,
// paymentMethod, createdAt, traceparent.
//
// Recovery points: `begun` (nothing at the processor is known) → create the payment under
// `<charge id>:create:<attempt>`; `created` (the payment's id recorded) → confirm that payment,
// and no other, under `<charge id>:confirm:<attempt>`. A payment never confirmed moves no money,
// so a create whose key the processor answered with a 5xx (and stores so: the same key would
// answer the same 500 for a day) goes on under the next attempt. A resumed confirm reads the
// payment first: confirmed or declined, that is the outcome; only an unconfirmed one is
// confirmed, and the processor lets a payment succeed once.
import { CHARGE, CHARGE_CREATED, CHARGE_FAILED, chargeCreatedPayload, chargeFailedPayload } from "../../events.ts";
import type { Sql } from "../db.ts";
import { problemJson, STORED_PROBLEMS } from "../problem-types.ts";
import type { FinalOutcome, FinalRow, FinishSql, ForeignProcess, KeyRef, Resume, StepContext, StepResult } from "../foreign/types.ts";
import type { CallResult, PaymentView } from "./client.ts";
import { attemptOf, field, numberField, unknownAfter } from "./steps.ts";

export const CHARGE_ENDPOINT = "POST /charges";

async function create({ resume, processor }: StepContext): Promise<StepResult> {
  const chargeId = field(resume, "chargeId");
  const attempt = attemptOf(resume, "createAttempt");
  const created = await processor.createPayment(
    { amountCents: numberField(resume, "amountCents"), currency: field(resume, "currency"), paymentMethod: field(resume, "paymentMethod"), chargeId },
    `${chargeId}:create:${attempt}`,
  );
  switch (created.kind) {
    case "ok":
      return { kind: "record", point: "created", resume: { ...resume, paymentId: created.value.id } };
    case "refused":
      return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: created.declineCode ?? created.code } };
    case "unknown":
      return unknownAfter(created, resume, "createAttempt");
  }
}

async function confirm({ resume, processor, resumed }: StepContext): Promise<StepResult> {
  const paymentId = field(resume, "paymentId");
  if (resumed) {
    const read = await processor.retrievePayment(paymentId);
    const known = fromRead(read, resume);
    if (known !== undefined) return known;
  }
  const attempt = attemptOf(resume, "confirmAttempt");
  const confirmed = await processor.confirmPayment(paymentId, `${field(resume, "chargeId")}:confirm:${attempt}`);
  switch (confirmed.kind) {
    case "ok":
      return fromPayment(confirmed.value, resume) ?? { kind: "unknown", cause: "processing", detail: "the payment is not confirmed yet", resume };
    case "refused":
      // Confirmed already (by an earlier holder whose answer was lost): the payment says how.
      if (confirmed.code === "payment_intent_unexpected_state") {
        return fromRead(await processor.retrievePayment(paymentId), resume) ?? { kind: "unknown", cause: "processing", detail: "the payment is in an unexpected state", resume };
      }
      return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: confirmed.declineCode ?? confirmed.code } };
    case "unknown":
      return unknownAfter(confirmed, resume, "confirmAttempt");
  }
}

/** What a read of the payment decides; undefined: it is unconfirmed, and may be confirmed. */
function fromRead(read: CallResult<PaymentView>, resume: Resume): StepResult | undefined {
  switch (read.kind) {
    case "ok":
      return fromPayment(read.value, resume);
    case "refused":
      // The payment recorded is not found, or the key cannot read it: an operator's matter.
      return { kind: "unknown", cause: "processor_error", detail: `the payment could not be read (${read.code})`, resume };
    case "unknown":
      return { kind: "unknown", cause: read.cause, detail: read.detail, resume };
  }
}

function fromPayment(payment: PaymentView, resume: Resume): StepResult | undefined {
  switch (payment.status) {
    case "succeeded":
      return { kind: "final", outcome: "succeeded", resume };
    case "requires_payment_method":
      // Back to needing a method: the last confirmation was declined.
      if (payment.declineCode !== null) return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: payment.declineCode } };
      return undefined;
    case "canceled":
      return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: "canceled" } };
    case "requires_confirmation":
      return undefined;
    default:
      return { kind: "unknown", cause: "processing", detail: `the payment is ${payment.status}`, resume };
  }
}

/**
 * Phase 3 as values: the charge's final state, its first event (ChargeCreated or ChargeFailed)
 * and the response to store, all from what phase 1 and the steps recorded (createdAt is the
 * one the charge row was written with).
 */
function final(_key: KeyRef, outcome: FinalOutcome, resume: Resume): FinalRow {
  const chargeId = field(resume, "chargeId");
  const paymentId = typeof resume.paymentId === "string" ? resume.paymentId : null;
  const common = { chargeId, amountCents: numberField(resume, "amountCents"), currency: field(resume, "currency") };
  if (outcome === "succeeded") {
    return {
      response: { status: 201, body: chargeBody({ ...common, status: "succeeded", processorPaymentId: paymentId, createdAt: field(resume, "createdAt") }) },
      columns: { charge_id: chargeId, charge_status: "succeeded", payment_id: paymentId, decline_code: null, event_type: CHARGE_CREATED, payload: chargeCreatedPayload(common) },
    };
  }
  const declineCode = field(resume, "declineCode");
  const failed = { ...common, declineCode };
  return {
    response: {
      status: STORED_PROBLEMS.cardDeclined.status,
      body: problemJson(STORED_PROBLEMS.cardDeclined, `the payment processor declined the charge (${declineCode})`, failed),
    },
    columns: { charge_id: chargeId, charge_status: "failed", payment_id: paymentId, decline_code: declineCode, event_type: CHARGE_FAILED, payload: chargeFailedPayload(failed) },
  };
}

/** Phase 3's SQL: the pending charge of each completed key made final, and its event (the charge's first: sequence 1). */
function finishSql(sql: Sql): FinishSql {
  return {
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
  };
}

/**
 * A charge's JSON as POST /charges answers it and GET /charges/:id begins: members in the
 * order of lib/api/operations/charges.ts's Charge schema, which test/processor-*.test.ts
 * checks these bodies against.
 */
export function chargeBody(c: { chargeId: string; amountCents: number; currency: string; status: string; processorPaymentId: string | null; createdAt: string }): string {
  return JSON.stringify({
    id: c.chargeId,
    amountCents: c.amountCents,
    currency: c.currency,
    status: c.status,
    ...(c.processorPaymentId !== null && { processorPaymentId: c.processorPaymentId }),
    createdAt: c.createdAt,
  });
}

export const chargeProcess: ForeignProcess = {
  endpoint: CHARGE_ENDPOINT,
  firstPoint: "begun",
  steps: { begun: create, created: confirm },
  final,
  finishSql,
};

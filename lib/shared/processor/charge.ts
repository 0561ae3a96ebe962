// POST /charges through the payment processor: its foreign steps and phase 3. Phase 1 (the
// key STARTED, the charge pending) is the API's (lib/api/operations/charges.ts); it writes
// into the key's resume what these steps need: chargeId, amountCents, currency,
// paymentMethod, traceparent.
//
// Recovery points: `begun` (nothing at the processor is known) → create the payment under
// `<charge id>:create:<attempt>`; `created` (the payment's id recorded) → confirm that payment,
// and no other, under `<charge id>:confirm:<attempt>`. A payment never confirmed moves no money,
// so a create whose key the processor answered with a 5xx (and stores so: the same key would
// answer the same 500 for a day) goes on under the next attempt. A resumed confirm reads the
// payment first: confirmed or declined, that is the outcome; only an unconfirmed one is
// confirmed, and the processor lets a payment succeed once.
import { CHARGE, CHARGE_CREATED, CHARGE_FAILED, chargeCreatedPayload, chargeFailedPayload, newEventId } from "../../events.ts";
import type { Sql } from "../db.ts";
import { problemJson, STORED_PROBLEMS } from "../problem-types.ts";
import type { FinalOutcome, ForeignProcess, KeyRef, Resume, StepContext, StepResult, StoredResponse } from "../foreign/types.ts";
import type { CallResult, PaymentView } from "./client.ts";
import { attemptOf, field, insertEvent, numberField, unknownAfter } from "./steps.ts";

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

interface FinalChargeRow {
  readonly amount_cents: number;
  readonly currency: string;
  readonly created_at: Date;
}

/** Phase 3: the charge's final state, its first event, and the response to store. */
async function finish(tx: Sql, key: KeyRef, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse> {
  const chargeId = field(resume, "chargeId");
  const paymentId = typeof resume.paymentId === "string" ? resume.paymentId : null;
  const declineCode = outcome === "refused" ? field(resume, "declineCode") : null;
  const [row] = await tx<FinalChargeRow[]>`
    update charges
       set status = ${outcome === "succeeded" ? "succeeded" : "failed"}, processor_payment_id = ${paymentId}, decline_code = ${declineCode}
     where id = ${chargeId}::uuid and tenant = ${key.tenant} and status = 'pending'
    returning amount_cents, currency, created_at`;
  if (!row) throw new Error(`bug: charge ${chargeId} of a STARTED key is not pending`);
  const traceparent = typeof resume.traceparent === "string" ? resume.traceparent : null;
  const common = { chargeId, amountCents: row.amount_cents, currency: row.currency };
  if (outcome === "succeeded") {
    await insertEvent(tx, { id: newEventId(), aggregateType: CHARGE, aggregateId: chargeId, sequence: 1, tenant: key.tenant, type: CHARGE_CREATED, payload: chargeCreatedPayload(common), traceparent });
    return { status: 201, body: chargeBody({ ...common, status: "succeeded", processorPaymentId: paymentId, createdAt: row.created_at.toISOString() }) };
  }
  const failed = { ...common, declineCode: declineCode! };
  await insertEvent(tx, { id: newEventId(), aggregateType: CHARGE, aggregateId: chargeId, sequence: 1, tenant: key.tenant, type: CHARGE_FAILED, payload: chargeFailedPayload(failed), traceparent });
  return {
    status: STORED_PROBLEMS.cardDeclined.status,
    body: problemJson(STORED_PROBLEMS.cardDeclined, `the payment processor declined the charge (${declineCode})`, failed),
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
  finish,
};

// POST /charges/:id/refunds through the payment processor: its foreign steps and phase 3.
// Phase 1 (the API's, lib/api/operations/refunds.ts) reserved the amount against the charge
// (pending_refund_cents) and wrote the refund `pending`; the key's resume holds refundId,
// chargeId, amountCents, paymentId (the charge's payment at the processor) and traceparent.
//
// Recovery points: `begun` → create the processor's refund under `<refund id>:refund`, the
// same key on every try, for ever: a refund moves money when it is created, so no attempt
// ever uses another key. `created` (its id recorded while the processor still processes it) →
// read it until it is final. Phase 3 turns the reservation into the refunded total (201,
// ChargeRefunded) or releases it (the processor's refusal, stored as a problem).
import { CHARGE, CHARGE_REFUNDED, newEventId } from "../../events.ts";
import type { Sql } from "../db.ts";
import { problemJson, STORED_PROBLEMS } from "../problem-types.ts";
import type { FinalOutcome, ForeignProcess, KeyRef, Resume, StepContext, StepResult, StoredResponse } from "../foreign/types.ts";
import type { CallResult, RefundView } from "./client.ts";
import { field, insertEvent, numberField } from "./steps.ts";

export const REFUND_ENDPOINT = "POST /charges/:id/refunds";

async function create({ resume, processor }: StepContext): Promise<StepResult> {
  const refundId = field(resume, "refundId");
  const created = await processor.createRefund(
    { paymentId: field(resume, "paymentId"), amountCents: numberField(resume, "amountCents"), refundId, chargeId: field(resume, "chargeId") },
    `${refundId}:refund`,
  );
  return fromCall(created, resume, true);
}

async function read({ resume, processor }: StepContext): Promise<StepResult> {
  return fromCall(await processor.retrieveRefund(field(resume, "processorRefundId")), resume, false);
}

function fromCall(call: CallResult<RefundView>, resume: Resume, creating: boolean): StepResult {
  switch (call.kind) {
    case "ok": {
      const refund = call.value;
      const recorded = { ...resume, processorRefundId: refund.id };
      if (refund.status === "succeeded") return { kind: "final", outcome: "succeeded", resume: recorded };
      if (refund.status === "failed" || refund.status === "canceled") {
        return { kind: "final", outcome: "refused", resume: { ...recorded, failureCode: refund.failureCode ?? refund.status } };
      }
      // Pending at the processor: its id is recorded, and the next try reads it.
      if (creating) return { kind: "record", point: "created", resume: recorded };
      return { kind: "unknown", cause: "processing", detail: `the refund is ${refund.status} at the processor`, resume: recorded };
    }
    case "refused":
      return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: call.code } };
    case "unknown":
      return { kind: "unknown", cause: call.cause, detail: call.detail, resume };
  }
}

interface DebitRow {
  readonly refunded_cents: number;
  readonly last_sequence: number;
}

/** Phase 3: the reservation confirmed or released, the refund's final state, its event, and the response to store. */
async function finish(tx: Sql, key: KeyRef, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse> {
  const refundId = field(resume, "refundId");
  const chargeId = field(resume, "chargeId");
  const amountCents = numberField(resume, "amountCents");
  const processorRefundId = typeof resume.processorRefundId === "string" ? resume.processorRefundId : null;
  if (outcome === "succeeded") {
    // The charge row first, as every refund statement locks it: one lock order, no deadlock.
    const [debit] = await tx<DebitRow[]>`
      update charges
         set refunded_cents = refunded_cents + ${amountCents}, pending_refund_cents = pending_refund_cents - ${amountCents},
             last_sequence = last_sequence + 1
       where id = ${chargeId}::uuid and tenant = ${key.tenant}
      returning refunded_cents, last_sequence`;
    const [refund] = await tx<{ created_at: Date }[]>`
      update refunds set status = 'succeeded', processor_refund_id = ${processorRefundId}
       where id = ${refundId}::uuid and status = 'pending'
      returning created_at`;
    if (!debit || !refund) throw new Error(`bug: refund ${refundId} of a STARTED key is not pending`);
    const payload = JSON.stringify({ chargeId, refundId, amountCents, refundedCents: debit.refunded_cents });
    const traceparent = typeof resume.traceparent === "string" ? resume.traceparent : null;
    await insertEvent(tx, { id: newEventId(), aggregateType: CHARGE, aggregateId: chargeId, sequence: debit.last_sequence, tenant: key.tenant, type: CHARGE_REFUNDED, payload, traceparent });
    return { status: 201, body: JSON.stringify({ id: refundId, chargeId, amountCents, createdAt: refund.created_at.toISOString() }) };
  }
  const failureCode = field(resume, "failureCode");
  await tx`
    update charges set pending_refund_cents = pending_refund_cents - ${amountCents}
     where id = ${chargeId}::uuid and tenant = ${key.tenant}`;
  await tx`
    update refunds set status = 'failed', processor_refund_id = ${processorRefundId}, failure_code = ${failureCode}
     where id = ${refundId}::uuid and status = 'pending'`;
  return {
    status: STORED_PROBLEMS.refundRefused.status,
    body: problemJson(STORED_PROBLEMS.refundRefused, `the payment processor refused the refund (${failureCode})`, { chargeId, refundId, failureCode }),
  };
}

export const refundProcess: ForeignProcess = {
  endpoint: REFUND_ENDPOINT,
  firstPoint: "begun",
  steps: { begun: create, created: read },
  finish,
};

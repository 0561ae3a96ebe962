// POST /charges/:id/refunds through the payment processor: its foreign steps and phase 3.
// Phase 1 (the API's, lib/api/operations/refunds.ts) reserved the amount against the charge
// (pending_refund_cents) and wrote the refund `pending`; the key's resume holds refundId,
// chargeId, amountCents, createdAt, paymentId (the charge's payment at the processor) and traceparent.
//
// Recovery points: `begun` → create the processor's refund under `<refund id>:refund`, the
// same key on every try, for ever: a refund moves money when it is created, so no attempt
// ever uses another key. `created` (its id recorded while the processor still processes it) →
// read it until it is final. Phase 3 turns the reservation into the refunded total (201,
// ChargeRefunded) or releases it (the processor's refusal, stored as a problem).
import { CHARGE, CHARGE_REFUNDED } from "../../events.ts";
import type { Sql } from "../db.ts";
import { chargeRefundedPayload } from "../outbox-insert.ts";
import { problemJson, STORED_PROBLEMS } from "../problem-types.ts";
import type { FinalOutcome, FinalRow, FinishSql, ForeignProcess, KeyRef, Resume, StepContext, StepResult } from "../foreign/types.ts";
import type { CallResult, RefundView } from "./client.ts";
import { field, numberField } from "./steps.ts";

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

/** Phase 3 as values: the response to store, and what the refund's row and its charge's get. */
function final(_key: KeyRef, outcome: FinalOutcome, resume: Resume): FinalRow {
  const refundId = field(resume, "refundId");
  const chargeId = field(resume, "chargeId");
  const amountCents = numberField(resume, "amountCents");
  const processorRefundId = typeof resume.processorRefundId === "string" ? resume.processorRefundId : null;
  const columns = { refund_id: refundId, charge_id: chargeId, amount_cents: amountCents, succeeded: outcome === "succeeded", processor_refund_id: processorRefundId };
  if (outcome === "succeeded") {
    return {
      response: { status: 201, body: JSON.stringify({ id: refundId, chargeId, amountCents, createdAt: field(resume, "createdAt") }) },
      columns: { ...columns, failure_code: null },
    };
  }
  const failureCode = field(resume, "failureCode");
  return {
    response: {
      status: STORED_PROBLEMS.refundRefused.status,
      body: problemJson(STORED_PROBLEMS.refundRefused, `the payment processor refused the refund (${failureCode})`, { chargeId, refundId, failureCode }),
    },
    columns: { ...columns, failure_code: failureCode },
  };
}

/**
 * Phase 3's SQL: the reservation turned into the refunded total (and the charge's next event
 * sequence, ChargeRefunded) or released, and the refund made final. The charge rows are locked
 * first and in id order, as every refund statement locks them: one lock order, no deadlock.
 * The refunded total in the event is the charge's after this refund, as the ledger's.
 */
function finishSql(sql: Sql): FinishSql {
  return {
    columns: { refund_id: "uuid", charge_id: "uuid", amount_cents: "int", succeeded: "boolean", processor_refund_id: "text", failure_code: "text" },
    write: sql`
      locked as (
        select c.id from charges c
         where c.id in (select w.charge_id from won w)
         order by c.id
           for update
      ),
      settle as (
        update charges c
           set refunded_cents = c.refunded_cents + case when w.succeeded then w.amount_cents else 0 end,
               pending_refund_cents = c.pending_refund_cents - w.amount_cents,
               last_sequence = c.last_sequence + case when w.succeeded then 1 else 0 end
          from won w join locked l on l.id = w.charge_id
         where c.id = w.charge_id and c.tenant = w.tenant
        returning w.n, c.refunded_cents, c.last_sequence
      ),
      refund as (
        update refunds f
           set status = case when w.succeeded then 'succeeded' else 'failed' end,
               processor_refund_id = w.processor_refund_id, failure_code = w.failure_code
          from won w
         where f.id = w.refund_id and f.status = 'pending'
        returning w.n
      ),
      events as (
        select s.n, ${CHARGE}::text as aggregate_type, w.charge_id as aggregate_id, s.last_sequence as sequence,
               ${CHARGE_REFUNDED}::text as event_type,
               ${chargeRefundedPayload(sql, "s")} as payload
          from settle s join won w on w.n = s.n join refund f on f.n = s.n
         where w.succeeded
      )`,
  };
}

export const refundProcess: ForeignProcess = {
  endpoint: REFUND_ENDPOINT,
  firstPoint: "begun",
  steps: { begun: create, created: read },
  final,
  finishSql,
  exclusive: (resume) => field(resume, "chargeId"),
};

// A refund's processor steps: `begun` creates the refund under `<refund id>:refund[:<n>]`;
// `created` reads it until final. A resumed key first looks for ours among the payment's refunds
// (by its metadata); not found, the create goes under the recorded attempt, which moves on only
// past a call the processor finished (its kept 5xx), so no earlier key can still make a refund.
import { Type as t, type Static } from "@sinclair/typebox";
import type Stripe from "stripe";
import { mapCall, type CallResult, type ProcessorAdapter } from "./processor.ts";
import { MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import type { StepContext, StepResult } from "../idempotency/model.ts";

/** Phase 1's recovery data (the charge's payment), then the processor's refund. */
export const RefundResume = t.Object({
  refundId: t.String({ format: "uuid" }),
  chargeId: t.String({ format: "uuid" }),
  amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  createdAt: t.String(),
  traceparent: t.Union([t.String(), t.Null()]),
  paymentId: t.String(),
  processorRefundId: t.Optional(t.String()),
  failureCode: t.Optional(t.String()),
  resolvedBy: t.Optional(t.String()),
  /** The attempt of the create's idempotency key: moved on past a call the processor finished with a 5xx. */
  refundAttempt: t.Optional(t.Integer({ minimum: 0 })),
});
export type RefundResume = Static<typeof RefundResume>;

const viewOf = (refund: Stripe.Refund) => ({ id: refund.id, status: refund.status ?? "pending", failureCode: refund.failure_reason ?? null });
type RefundView = ReturnType<typeof viewOf>;

// The page size of the listing: Stripe's largest, so one call reads a payment's refunds.
const LIST_PAGE = 100;
// A payment has a handful of refunds; more pages than this is a processor that pages wrong.
const MAX_LIST_PAGES = 1000;

/** Attempt 0's key has no suffix: keys stored by earlier releases resume on it. */
export function refundKey(refundId: string, attempt: number): string {
  return attempt === 0 ? `${refundId}:refund` : `${refundId}:refund:${attempt}`;
}

export const refundCalls = (p: ProcessorAdapter) => ({
  create: (r: RefundResume, key: string) =>
    mapCall(
      p.call("POST", (api) =>
        api.refunds.create({ payment_intent: r.paymentId, amount: r.amountCents, metadata: { refund_id: r.refundId, charge_id: r.chargeId } }, { idempotencyKey: key }),
      ),
      viewOf,
    ),
  retrieve: (id: string) => mapCall(p.call("GET", (api) => api.refunds.retrieve(id)), viewOf),
  /** Ours among the payment's refunds (its metadata's refund_id), every page read; ok with undefined: none of ours. */
  async find(r: RefundResume): Promise<CallResult<RefundView | undefined>> {
    let after: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const listed = await p.call("GET", (api) => api.refunds.list({ payment_intent: r.paymentId, limit: LIST_PAGE, ...(after !== undefined && { starting_after: after }) }));
      if (listed.kind !== "ok") return listed;
      const ours = listed.value.data.find((refund) => refund.metadata?.refund_id === r.refundId);
      if (ours !== undefined) return { kind: "ok", value: viewOf(ours) };
      const last = listed.value.data.at(-1);
      if (!listed.value.has_more || last === undefined) return { kind: "ok", value: undefined };
      after = last.id;
    }
    throw new Error(`bug: the processor listed more than ${MAX_LIST_PAGES} pages of refunds of ${r.paymentId}`);
  },
});
export type RefundCalls = ReturnType<typeof refundCalls>;
type Step = (ctx: StepContext<RefundResume, RefundCalls>) => Promise<StepResult<RefundResume>>;

const create: Step = async ({ resume, processor, resumed }) => {
  // An earlier holder's create may have been made, its answer lost. A key past attempt 0 is
  // always a resume: checked too, as the next key's guard.
  if (resumed || (resume.refundAttempt ?? 0) > 0) {
    const found = await processor.find(resume);
    switch (found.kind) {
      case "ok":
        if (found.value !== undefined) return fromCall({ kind: "ok", value: found.value }, resume, true);
        break;
      case "refused":
        return { kind: "unknown", cause: "processor_error", detail: `the payment's refunds could not be listed (${found.code})`, resume };
      case "unknown":
        return { kind: "unknown", cause: found.cause, detail: `listing the payment's refunds: ${found.detail}`, resume };
    }
  }
  // None of ours at the processor, and no call under an earlier attempt's key can make one now.
  const attempt = resume.refundAttempt ?? 0;
  const created = await processor.create(resume, refundKey(resume.refundId, attempt));
  if (created.kind === "unknown" && created.finished) {
    // The processor ended this call and keeps its 5xx under the key, so the next try lists again
    // and, if no refund was made, sends the next attempt's key.
    return { kind: "unknown", cause: created.cause, detail: created.detail, resume: { ...resume, refundAttempt: attempt + 1 } };
  }
  return fromCall(created, resume, true);
};
const read: Step = async ({ resume, processor }) => fromCall(await processor.retrieve(resume.processorRefundId!), resume, false);

function fromCall(call: CallResult<RefundView>, resume: RefundResume, creating: boolean): StepResult<RefundResume> {
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

export const refundSteps = { begun: create, created: read };

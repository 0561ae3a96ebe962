// POST /charges/:id/increment-authorization: an authorized charge's amount raised to a new total
// (Stripe's incremental authorization), through the factory of transition.ts. The payment stays
// requires_capture either way, so its amount tells whether the increment was made.
import { Type as t } from "@sinclair/typebox";
import { AmountCents, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { chargeTransition, problemType } from "./transition.ts";

export const IncrementAuthorizationBody = t.Object(
  { amountCents: AmountCents("The charge's new total, in cents: more than its amount now") },
  { additionalProperties: false },
);

export const incrementAuthorization = chargeTransition({
  name: "incrementAuthorization",
  summary: "Raise an authorized charge's amount",
  path: "/charges/:id/increment-authorization",
  body: IncrementAuthorizationBody,
  amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  to: "authorized",
  verb: ["increment", "incremented"],
  sets: {
    amountCents: { ledger: ({ request }) => request.amountCents, final: (r) => r.amountCents },
  },
  event: {
    type: "ChargeAuthorizationIncreased",
    data: ({ charge, before }) => ({ chargeId: charge.id, amountCents: charge.amountCents, previousAmountCents: before.amountCents }),
  },
  call: {
    send: (api, r, idempotencyKey) => api.paymentIntents.incrementAuthorization(r.paymentId, { amount: r.amountCents }, { idempotencyKey }),
    decide: (payment, resume) => {
      if (payment.status === "requires_capture" && payment.amount === resume.amountCents) return { kind: "final", outcome: "succeeded", resume };
      if (payment.status === "succeeded" || payment.status === "canceled") return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: payment.status } };
      return undefined;
    },
  },
  refusals: {
    state: problemType("chargeNotIncrementable", "charge-not-incrementable", "Charge's authorization not incrementable"),
    checks: [
      {
        problem: problemType("incrementNotGreater", "increment-not-greater", "New amount not greater than the authorized amount"),
        doc: "the new amount is not more than the charge's amount",
        when: ({ sql, charge, request }) => sql`${request.amountCents} <= ${charge.amountCents}`,
        detail: (chargeId, cents) => `charge ${chargeId} has ${cents} cents authorized: the new total must be more`,
      },
    ],
    processor: problemType("incrementRefused", "increment-refused", "Increment refused by the payment processor"),
  },
});

// POST /charges/:id/cancel: an authorized manual charge canceled, its authorization released,
// through the factory of transition.ts.
import { Type as t } from "@sinclair/typebox";
import { chargeTransition, problemType } from "./transition.ts";

export const CancelBody = t.Object({}, { additionalProperties: false, description: "Nothing: {}" });

export const cancelCharge = chargeTransition({
  name: "cancelCharge",
  summary: "Cancel an authorized charge",
  path: "/charges/:id/cancel",
  body: CancelBody,
  during: "canceling",
  to: "canceled",
  verb: ["cancel", "canceled"],
  event: { type: "ChargeCanceled", data: ({ charge }) => ({ chargeId: charge.id }) },
  call: {
    send: (api, r, idempotencyKey) => api.paymentIntents.cancel(r.paymentId, {}, { idempotencyKey }),
    decide: (payment, resume) => {
      if (payment.status === "canceled") return { kind: "final", outcome: "succeeded", resume };
      if (payment.status === "succeeded") return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: "already_captured" } };
      return undefined;
    },
  },
  refusals: {
    state: problemType("chargeNotCancelable", "charge-not-cancelable", "Charge not cancelable"),
    processor: problemType("cancelRefused", "cancel-refused", "Cancel refused by the payment processor"),
  },
});

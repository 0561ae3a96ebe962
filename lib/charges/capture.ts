// POST /charges/:id/capture: an authorized manual charge captured, whole or `amountCents` of it
// (the rest released, as Stripe does), through the factory of transition.ts.
import { Type as t } from "@sinclair/typebox";
import { AmountCents, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { chargeTransition, problemType } from "./transition.ts";

export const CaptureBody = t.Object(
  { amountCents: t.Optional(AmountCents("What to capture, in cents, up to the authorized amount (the rest is released); all of it when absent")) },
  { additionalProperties: false },
);

const Cents = t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS });

export const captureCharge = chargeTransition({
  name: "captureCharge",
  summary: "Capture an authorized charge",
  path: "/charges/:id/capture",
  body: CaptureBody,
  // null: all that is capturable.
  amountCents: t.Union([Cents, t.Null()]),
  during: "capturing",
  to: "succeeded",
  verb: ["capture", "captured"],
  sets: {
    capturedCents: {
      ledger: ({ sql, charge, request }) => sql`coalesce(${request.amountCents}, ${charge.amountCents})`,
      final: (r) => r.capturedCents ?? r.amountCents ?? r.authorizedCents,
    },
  },
  event: { type: "ChargeCaptured", data: ({ charge }) => ({ chargeId: charge.id, capturedCents: charge.capturedCents }) },
  resume: { capturedCents: t.Optional(Cents) },
  call: {
    send: (api, r, idempotencyKey) => api.paymentIntents.capture(r.paymentId, r.amountCents === null ? {} : { amount_to_capture: r.amountCents }, { idempotencyKey }),
    decide: (payment, resume) => {
      if (payment.status === "succeeded") return { kind: "final", outcome: "succeeded", resume: { ...resume, capturedCents: payment.amountReceived } };
      if (payment.status === "canceled") return { kind: "final", outcome: "refused", resume: { ...resume, failureCode: "canceled" } };
      return undefined;
    },
  },
  refusals: {
    state: problemType("chargeNotCapturable", "charge-not-capturable", "Charge not capturable"),
    checks: [
      {
        problem: problemType("captureExceedsAuthorized", "capture-exceeds-authorized", "Capture exceeds the authorized amount"),
        doc: "the amount is more than authorized",
        when: ({ sql, charge, request }) => sql`${request.amountCents} > ${charge.amountCents}`,
        detail: (chargeId, cents) => `charge ${chargeId} has ${cents} cents authorized`,
      },
    ],
    processor: problemType("captureRefused", "capture-refused", "Capture refused by the payment processor"),
  },
});

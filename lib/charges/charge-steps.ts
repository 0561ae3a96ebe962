// A charge's processor steps: `begun` creates the payment under `<charge id>:create:<attempt>`;
// `created` confirms that payment, and no other, under `<charge id>:confirm:<attempt>`. An
// unconfirmed payment moves no money, so after a create answered with a stored 5xx the next
// attempt's key is safe. The processor lets a payment succeed once, so a resumed confirm reads it
// first. Every change of an authorized charge reuses these calls (transition.ts).
import { Type as t, type Static } from "@sinclair/typebox";
import type Stripe from "stripe";
import { mapCall, type CallResult, type ProcessorAdapter } from "./processor.ts";
import { MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import type { StepContext, StepResult } from "../idempotency/model.ts";

/** Phase 1's recovery data, then what the steps learnt. */
export const ChargeResume = t.Object({
  chargeId: t.String({ format: "uuid" }),
  amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  currency: t.String(),
  paymentMethod: t.String(),
  createdAt: t.String(),
  traceparent: t.Union([t.String(), t.Null()]),
  capture: t.Optional(t.Literal("manual")),
  createAttempt: t.Optional(t.Integer({ minimum: 0 })),
  confirmAttempt: t.Optional(t.Integer({ minimum: 0 })),
  paymentId: t.Optional(t.String()),
  declineCode: t.Optional(t.String()),
  resolvedBy: t.Optional(t.String()),
});
export type ChargeResume = Static<typeof ChargeResume>;

export function paymentView(pi: Stripe.PaymentIntent) {
  const error = pi.last_payment_error;
  return { id: pi.id, status: pi.status, declineCode: error ? (error.decline_code ?? error.code ?? "declined") : null, amount: pi.amount, amountReceived: pi.amount_received };
}
export type PaymentView = ReturnType<typeof paymentView>;

export const payments = (p: ProcessorAdapter) => ({
  create: (c: ChargeResume, key: string) =>
    mapCall(
      p.call("POST", (api) =>
        api.paymentIntents.create(
          {
            amount: c.amountCents,
            currency: c.currency,
            payment_method: c.paymentMethod,
            // A server-side confirmation with no customer present: no method that needs a redirect.
            automatic_payment_methods: { enabled: true, allow_redirects: "never" },
            // Authorized only, captured later (POST /charges/:id/capture), as Stripe documents; and
            // its authorization may be raised before (Stripe increments only a payment that asked).
            ...(c.capture === "manual" && { capture_method: "manual" as const, payment_method_options: { card: { request_incremental_authorization: "if_available" as const } } }),
            metadata: { charge_id: c.chargeId },
          },
          { idempotencyKey: key },
        ),
      ),
      paymentView,
    ),
  confirm: (id: string, key: string) => mapCall(p.call("POST", (api) => api.paymentIntents.confirm(id, {}, { idempotencyKey: key })), paymentView),
  retrieve: (id: string) => mapCall(p.call("GET", (api) => api.paymentIntents.retrieve(id)), paymentView),
});
export type Payments = ReturnType<typeof payments>;
type Step = (ctx: StepContext<ChargeResume, Payments>) => Promise<StepResult<ChargeResume>>;

// Stripe's code for a call the payment's state does not allow (confirmed, captured or canceled already).
export const UNEXPECTED_STATE = "payment_intent_unexpected_state";

/**
 * An unknown outcome of a call harmless to repeat under another key (a create, a confirmation or a
 * change: applied once per payment). After a 5xx, which the processor stored under the key and would
 * replay, the next try takes the next attempt; with no answer, what the key holds is the truth.
 */
export function unknownAfter<R extends Readonly<Record<string, unknown>>>(call: Extract<CallResult<unknown>, { kind: "unknown" }>, resume: R, attemptName: keyof R & string): StepResult<R> {
  const current = resume[attemptName];
  const next = call.status !== null && call.status >= 500 ? { ...resume, [attemptName]: (typeof current === "number" ? current : 0) + 1 } : resume;
  return { kind: "unknown", cause: call.cause, detail: call.detail, resume: next };
}

export const create: Step = async ({ resume, processor }) => {
  const created = await processor.create(resume, `${resume.chargeId}:create:${resume.createAttempt ?? 0}`);
  switch (created.kind) {
    case "ok":
      return { kind: "record", point: "created", resume: { ...resume, paymentId: created.value.id } };
    case "refused":
      return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: created.declineCode ?? created.code } };
    case "unknown":
      return unknownAfter(created, resume, "createAttempt");
  }
};

export const confirm: Step = async ({ resume, processor, resumed }) => {
  const paymentId = resume.paymentId!;
  const read = async () => fromRead(await processor.retrieve(paymentId), resume, fromPayment);
  const known = resumed ? await read() : undefined;
  if (known !== undefined) return known;
  const confirmed = await processor.confirm(paymentId, `${resume.chargeId}:confirm:${resume.confirmAttempt ?? 0}`);
  switch (confirmed.kind) {
    case "ok":
      return fromPayment(confirmed.value, resume) ?? { kind: "unknown", cause: "processing", detail: "the payment is not confirmed yet", resume };
    case "refused":
      // Confirmed already (by an earlier holder whose answer was lost): the payment says how.
      if (confirmed.code === UNEXPECTED_STATE) {
        return (await read()) ?? { kind: "unknown", cause: "processing", detail: "the payment is in an unexpected state", resume };
      }
      return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: confirmed.declineCode ?? confirmed.code } };
    case "unknown":
      return unknownAfter(confirmed, resume, "confirmAttempt");
  }
};

/** What a read of the payment decides; undefined: `decide` finds it open (to confirm, or to change). */
export function fromRead<R>(read: CallResult<PaymentView>, resume: R, decide: (payment: PaymentView, resume: R) => StepResult<R> | undefined): StepResult<R> | undefined {
  switch (read.kind) {
    case "ok":
      return decide(read.value, resume);
    case "refused":
      // The payment recorded is not found, or the key cannot read it: an operator's matter.
      return { kind: "unknown", cause: "processor_error", detail: `the payment could not be read (${read.code})`, resume };
    case "unknown":
      return { kind: "unknown", cause: read.cause, detail: read.detail, resume };
  }
}

function fromPayment(payment: PaymentView, resume: ChargeResume): StepResult<ChargeResume> | undefined {
  const { status, declineCode } = payment;
  // A manual charge's confirmation authorizes: its final state (authorized) until captured.
  if (status === "succeeded" || (status === "requires_capture" && resume.capture === "manual")) {
    return { kind: "final", outcome: "succeeded", resume };
  }
  // Back to needing a method after a decline: the last confirmation was declined.
  if (status === "requires_payment_method" && declineCode !== null) return { kind: "final", outcome: "refused", resume: { ...resume, declineCode } };
  if (status === "canceled") return { kind: "final", outcome: "refused", resume: { ...resume, declineCode: "canceled" } };
  if (status === "requires_payment_method" || status === "requires_confirmation") return undefined;
  return { kind: "unknown", cause: "processing", detail: `the payment is ${status}`, resume };
}

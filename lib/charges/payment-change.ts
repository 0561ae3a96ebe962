// A change of an authorized payment at the processor (capture, cancel, an increment), as every
// transition's one step. The processor applies such a change once, so a resumed key reads the
// payment first (an earlier holder's answer may be lost), and a refusal because the payment
// moved on is settled by reading it.
import type { CallResult } from "./processor.ts";
import type { PaymentView } from "./charge-steps.ts";
import type { StepResult } from "../idempotency/model.ts";
import { attemptOf, unknownAfter } from "./steps.ts";

// Stripe's code for a change the payment's state does not allow (captured or canceled already).
const UNEXPECTED_STATE = "payment_intent_unexpected_state";

export interface PaymentChange<R> {
  readonly resume: R;
  /** Whether an earlier holder of the key may have sent the change (the step runs again). */
  readonly resumed: boolean;
  readonly attemptName: keyof R & string;
  /** The change, under the idempotency key of `attempt`. */
  readonly send: (attempt: number) => Promise<CallResult<PaymentView>>;
  readonly read: () => Promise<CallResult<PaymentView>>;
  /** What the payment decides; undefined: the change is not made yet (the payment may stay requires_capture either way). */
  readonly decide: (payment: PaymentView, resume: R) => StepResult<R> | undefined;
}

export async function changePayment<R extends { readonly failureCode?: string }>(change: PaymentChange<R>): Promise<StepResult<R>> {
  const { resume } = change;
  if (change.resumed) {
    const known = fromRead(await change.read(), change);
    if (known !== undefined) return known;
  }
  const attempt = resume[change.attemptName];
  const call = await change.send(attemptOf(typeof attempt === "number" ? attempt : undefined));
  switch (call.kind) {
    case "ok":
      return change.decide(call.value, resume) ?? { kind: "unknown", cause: "processing", detail: `the payment is ${call.value.status}`, resume };
    case "refused": {
      const refused: StepResult<R> = { kind: "final", outcome: "refused", resume: { ...resume, failureCode: call.code } };
      if (call.code !== UNEXPECTED_STATE) return refused;
      return fromRead(await change.read(), change) ?? refused;
    }
    case "unknown":
      return unknownAfter(call, resume, change.attemptName);
  }
}

/** What a read of the payment decides; undefined: the change is not made yet. */
function fromRead<R>(read: CallResult<PaymentView>, change: PaymentChange<R>): StepResult<R> | undefined {
  switch (read.kind) {
    case "ok":
      return change.decide(read.value, change.resume);
    case "refused":
      return { kind: "unknown", cause: "processor_error", detail: `the payment could not be read (${read.code})`, resume: change.resume };
    case "unknown":
      return { kind: "unknown", cause: read.cause, detail: read.detail, resume: change.resume };
  }
}

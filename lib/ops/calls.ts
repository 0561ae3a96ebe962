// The processor calls a key's steps made, as the operator reads them: each call's idempotency
// key is derived from the key's recovery data the way the steps derive it (lib/charges/*-steps),
// one key per attempt, a new attempt only after the processor stored a 5xx under the last one.
import type { Resume } from "../idempotency/model.ts";

export interface ProcessorCall {
  readonly call: string;
  /** The Idempotency-Key the call was sent with. */
  readonly processorKey: string;
  readonly outcome: string;
}

interface CallPlan {
  readonly call: string;
  /** The resume member that names the object the keys are made from. */
  readonly owner: string;
  readonly attempt: string;
  readonly key: (owner: string, attempt: number) => string;
  /** The resume member whose presence says the call was answered. */
  readonly answered?: string;
}

const suffixed = (name: string) => (owner: string, attempt: number) => `${owner}:${name}:${attempt}`;

// By the key's endpoint, in the order the steps run.
const PLANS: Readonly<Record<string, readonly CallPlan[]>> = {
  "POST /charges": [
    { call: "create payment", owner: "chargeId", attempt: "createAttempt", key: suffixed("create"), answered: "paymentId" },
    { call: "confirm payment", owner: "chargeId", attempt: "confirmAttempt", key: suffixed("confirm") },
  ],
  "POST /charges/:id/refunds": [
    { call: "create refund", owner: "refundId", attempt: "refundAttempt", key: (owner, n) => (n === 0 ? `${owner}:refund` : `${owner}:refund:${n}`), answered: "processorRefundId" },
  ],
  "POST /charges/:id/capture": [{ call: "capture payment", owner: "chargeId", attempt: "captureAttempt", key: suffixed("capture") }],
  "POST /charges/:id/cancel": [{ call: "cancel payment", owner: "chargeId", attempt: "cancelAttempt", key: suffixed("cancel") }],
};

/**
 * The calls a key's steps made (or are about to make), with what is known of each: an
 * earlier attempt was answered with a 5xx (the processor keeps that answer under its key), the
 * last one's outcome is the key's own.
 */
export function processorCalls(endpoint: string, resume: Resume | null, keyOutcome: string): ProcessorCall[] {
  if (resume === null) return [];
  const calls: ProcessorCall[] = [];
  for (const plan of PLANS[endpoint] ?? []) {
    const owner = resume[plan.owner];
    if (typeof owner !== "string") continue;
    const last = typeof resume[plan.attempt] === "number" ? (resume[plan.attempt] as number) : 0;
    for (let n = 0; n < last; n++) calls.push({ call: plan.call, processorKey: plan.key(owner, n), outcome: "answered 5xx (stored under this key by the processor); next attempt" });
    const answered = plan.answered === undefined ? undefined : resume[plan.answered];
    const outcome = typeof answered === "string" ? `answered: ${answered}` : keyOutcome;
    calls.push({ call: plan.call, processorKey: plan.key(owner, last), outcome });
  }
  return calls;
}

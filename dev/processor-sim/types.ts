// The simulator's public shapes: what a test, a chaos scenario or dev mode sees of it.

export type SimOperation = "create" | "confirm" | "retrieve" | "capture" | "cancel" | "incrementAuthorization" | "refund" | "retrieveRefund" | "listRefunds";

export type SimFaultKind =
  /** While set, connections to the port are refused: the server stops listening, and listens again when cleared. */
  | "refuse"
  /** Answers 500 api_error without applying the effect; the 500 is stored under the idempotency key, as Stripe does. */
  | "500-before"
  /** Applies the effect (the payment confirmed, money moved), then answers 500, stored under the key. */
  | "500-after"
  /** Never answers, until the caller gives up; no effect. The key stays in flight while the connection is open. */
  | "hang"
  /** Applies the effect and stores the real answer under the key, then closes the connection without answering. */
  | "drop-after";

export interface SimFaultRule {
  kind: SimFaultKind;
  /** Which calls it hits; "any" (the default) is every API call. Ignored by "refuse", which takes the whole port. */
  op?: SimOperation | "any";
  /** How many calls it hits before it lifts itself; unlimited when absent. Ignored by "refuse". */
  times?: number;
  /** The chance, 0..1, that a matching call is hit (1 when absent). Ignored by "refuse". */
  probability?: number;
  /** Only calls about this payment method (as the caller named it, e.g. "pm_card_visa"). Ignored by "refuse". */
  paymentMethod?: string;
  /** "refuse" only: lifts itself after this long, so a process that cannot reach the control surface any more gets it back. */
  refuseForMs?: number;
}

export interface SimFaults {
  /** Delay before each answer while these faults are set; replaces the simulator's own latencyMs. */
  latencyMs?: number;
  /** The first matching rule hits a call. */
  rules?: SimFaultRule[];
}

export interface SimPaymentIntentEntry {
  id: string;
  amount: number;
  currency: string;
  status: string;
  /** The payment method as the caller named it ("pm_card_visa"), not the id Stripe mints for it. */
  paymentMethod: string | null;
  metadata: Record<string, string>;
  /** Confirmations that moved money: more than 1 would be a double charge. */
  confirmations: number;
  amountCaptured: number;
  /** Authorized, not captured (capture_method=manual). */
  amountCapturable: number;
  amountRefunded: number;
  /** What its creation asked of incremental authorization (if_available, never), or null. */
  incrementalAuthorization: string | null;
  /** The Idempotency-Key of the call that created it. */
  idempotencyKey: string | null;
}

export interface SimRefundEntry {
  id: string;
  paymentIntent: string;
  amount: number;
  status: string;
  metadata: Record<string, string>;
  idempotencyKey: string | null;
}

export interface SimLedger {
  paymentIntents: SimPaymentIntentEntry[];
  refunds: SimRefundEntry[];
  totals: { captured: number; refunded: number };
}

/**
 * What became of a call, for tests that wait on a call being seen rather than on time:
 * "hung" while a hang holds it, "abandoned" when the caller left before the answer (a hang,
 * or a latency longer than its timeout: the effect may have happened all the same).
 */
export type SimRequestState = "in-flight" | "answered" | "hung" | "dropped" | "abandoned";

export interface SimRequestEntry {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  readonly op: SimOperation | null;
  readonly idempotencyKey: string | null;
  state: SimRequestState;
  /** The status answered (or that would have been, for "dropped"). */
  status: number | null;
  /** True when the answer was a stored one (Idempotent-Replayed: true). */
  replayed: boolean;
}

// The processor's objects (PaymentIntents, their charges, refunds) and how they render as
// Stripe's JSON. The ledger is read from here: it is the money the processor moved.
import { clientSecret } from "./ids.ts";
import type { SimLedger } from "./types.ts";

export type Decline = "generic_decline" | "insufficient_funds";

export interface TestMethod {
  readonly brand: string;
  readonly last4: string;
  readonly decline: Decline | null;
}

// Stripe's test payment methods: each call with one mints a PaymentMethod of that card.
export const TEST_METHODS: Readonly<Record<string, TestMethod>> = {
  pm_card_visa: { brand: "visa", last4: "4242", decline: null },
  pm_card_mastercard: { brand: "mastercard", last4: "4444", decline: null },
  pm_card_chargeDeclined: { brand: "visa", last4: "0002", decline: "generic_decline" },
  pm_card_chargeDeclinedInsufficientFunds: { brand: "visa", last4: "9995", decline: "insufficient_funds" },
  // Pays; each refund of it fails afterwards (Stripe's 4000 0000 0000 5126).
  pm_card_refundFail: { brand: "visa", last4: "5126", decline: null },
};

/** The test method whose refunds fail, and why (Stripe's failure_reason for that card). */
export const REFUND_FAILS: Readonly<Record<string, string>> = { pm_card_refundFail: "expired_or_canceled_card" };

export const DECLINE_MESSAGES: Readonly<Record<Decline, string>> = {
  generic_decline: "Your card was declined.",
  insufficient_funds: "Your card has insufficient funds.",
};

export interface AutomaticMethods {
  readonly enabled: boolean;
  readonly allow_redirects: string;
}

export interface IntentRecord {
  readonly id: string;
  readonly secret: string;
  /** What is authorized; an incremental authorization raises it. */
  amount: number;
  readonly currency: string;
  readonly created: number;
  readonly description: string | null;
  readonly paymentMethodTypes: readonly string[];
  /** allowed_payment_method_types as given, or null. */
  readonly allowedTypes: readonly string[] | null;
  readonly automatic: AutomaticMethods | null;
  readonly captureMethod: string;
  /** payment_method_options[card][request_incremental_authorization] at creation: if_available, never, or null (not asked). */
  readonly incrementalAuthorization: string | null;
  readonly idempotencyKey: string | null;
  metadata: Record<string, string>;
  status: string;
  /** The minted PaymentMethod id the object shows, and the test method it stands for. */
  methodId: string | null;
  methodName: string | null;
  latestCharge: string | null;
  amountReceived: number;
  /** Authorized and not captured yet (capture_method=manual, requires_capture). */
  amountCapturable: number;
  canceledAt: number | null;
  cancellationReason: string | null;
  amountRefunded: number;
  confirmations: number;
  lastPaymentError: Record<string, unknown> | null;
}

export interface RefundRecord {
  readonly id: string;
  readonly amount: number;
  readonly currency: string;
  readonly charge: string | null;
  readonly paymentIntent: string;
  readonly created: number;
  readonly metadata: Record<string, string>;
  readonly reason: string | null;
  readonly balanceTransaction: string;
  readonly idempotencyKey: string | null;
  readonly status: string;
  /** Why a failed refund failed (Stripe's failure_reason); null otherwise. */
  readonly failureReason: string | null;
}

export class Store {
  readonly intents = new Map<string, IntentRecord>();
  readonly refunds = new Map<string, RefundRecord>();
  /** Minted PaymentMethod id → the test method it was minted from. */
  readonly methods = new Map<string, string>();

  /** The test method a payment method id stands for (a test name, or an id minted from one). */
  testMethodName(id: string): string | undefined {
    return TEST_METHODS[id] ? id : this.methods.get(id);
  }

  ledger(): SimLedger {
    const paymentIntents = [...this.intents.values()].map((intent) => ({
      id: intent.id,
      amount: intent.amount,
      currency: intent.currency,
      status: intent.status,
      paymentMethod: intent.methodName,
      metadata: { ...intent.metadata },
      confirmations: intent.confirmations,
      amountCaptured: intent.amountReceived,
      amountCapturable: intent.amountCapturable,
      amountRefunded: intent.amountRefunded,
      incrementalAuthorization: intent.incrementalAuthorization,
      idempotencyKey: intent.idempotencyKey,
    }));
    const refunds = [...this.refunds.values()].map((refund) => ({
      id: refund.id,
      paymentIntent: refund.paymentIntent,
      amount: refund.amount,
      status: refund.status,
      metadata: { ...refund.metadata },
      idempotencyKey: refund.idempotencyKey,
    }));
    const captured = paymentIntents.reduce((sum, intent) => sum + intent.amountCaptured, 0);
    const refunded = refunds.filter((refund) => refund.status === "succeeded").reduce((sum, refund) => sum + refund.amount, 0);
    return { paymentIntents, refunds, totals: { captured, refunded } };
  }
}

export function newIntentSecret(id: string): string {
  return clientSecret(id);
}

/** A PaymentIntent as Stripe's API renders it (the fields a server-side integration reads, and their neighbours). */
export function intentJson(intent: IntentRecord): Record<string, unknown> {
  return {
    id: intent.id,
    object: "payment_intent",
    allowed_payment_method_types: intent.allowedTypes ? [...intent.allowedTypes] : null,
    amount: intent.amount,
    amount_capturable: intent.amountCapturable,
    amount_details: { tip: {} },
    amount_received: intent.amountReceived,
    application: null,
    application_fee_amount: null,
    automatic_payment_methods: intent.automatic,
    canceled_at: intent.canceledAt,
    cancellation_reason: intent.cancellationReason,
    capture_method: intent.captureMethod,
    client_secret: intent.secret,
    confirmation_method: "automatic",
    created: intent.created,
    currency: intent.currency,
    customer: null,
    description: intent.description,
    excluded_payment_method_types: null,
    last_payment_error: intent.lastPaymentError,
    latest_charge: intent.latestCharge,
    livemode: false,
    metadata: { ...intent.metadata },
    next_action: null,
    on_behalf_of: null,
    payment_method: intent.methodId,
    payment_method_configuration_details: null,
    payment_method_options: intent.incrementalAuthorization === null ? {} : { card: { request_incremental_authorization: intent.incrementalAuthorization } },
    payment_method_types: [...intent.paymentMethodTypes],
    processing: null,
    receipt_email: null,
    review: null,
    setup_future_usage: null,
    shipping: null,
    source: null,
    statement_descriptor: null,
    statement_descriptor_suffix: null,
    status: intent.status,
    transfer_data: null,
    transfer_group: null,
  };
}

/** A refund as Stripe's API renders it; `status` overrides the stored one (a failing refund is pending when created). */
export function refundJson(refund: RefundRecord, status = refund.status): Record<string, unknown> {
  return {
    id: refund.id,
    object: "refund",
    amount: refund.amount,
    balance_transaction: refund.balanceTransaction,
    charge: refund.charge,
    created: refund.created,
    currency: refund.currency,
    destination_details: null,
    metadata: { ...refund.metadata },
    payment_intent: refund.paymentIntent,
    reason: refund.reason,
    receipt_number: null,
    source_transfer_reversal: null,
    status,
    ...(status === "failed" && { failure_reason: refund.failureReason }),
    transfer_reversal: null,
  };
}

/** The PaymentMethod object Stripe puts in a decline's error. */
export function paymentMethodJson(id: string, method: TestMethod, created: number): Record<string, unknown> {
  return {
    id,
    object: "payment_method",
    billing_details: { address: null, email: null, name: null, phone: null },
    card: { brand: method.brand, country: "US", exp_month: 12, exp_year: new Date().getUTCFullYear() + 1, funding: "credit", last4: method.last4 },
    created,
    customer: null,
    livemode: false,
    metadata: {},
    type: "card",
  };
}

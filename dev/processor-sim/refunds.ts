// Refunds of a succeeded PaymentIntent (or of its charge), whole or in part, never beyond
// what is left; each succeeds at once, as a test card's refund does, but those of
// pm_card_refundFail, which fail after they are created. Listed as Stripe lists
// them: newest first, by PaymentIntent or charge, a page at a time.
import { checkParams, errorAnswer, invalidParam, metadataOf, noSuch, type ApiAnswer, type ParamSpec } from "./errors.ts";
import type { FormObject } from "./form.ts";
import { newId, nowSeconds } from "./ids.ts";
import type { CallContext } from "./intents.ts";
import { REFUND_FAILS, refundJson, type IntentRecord, type Store } from "./store.ts";

const CREATE_SPEC: ParamSpec = {
  payment_intent: "string",
  charge: "string",
  amount: "integer",
  metadata: "metadata",
  reason: "string",
};

const REASONS = new Set(["duplicate", "fraudulent", "requested_by_customer"]);

export function createRefund(store: Store, form: FormObject, ctx: CallContext): ApiAnswer {
  const wrong = checkParams(form, CREATE_SPEC) ?? checkReason(form);
  if (wrong) return wrong;
  const found = intentToRefund(store, form);
  if ("status" in found) return found;
  const intent = found.intent;
  if (intent.status !== "succeeded" || !intent.latestCharge) {
    return errorAnswer(400, { type: "invalid_request_error", message: `This PaymentIntent (${intent.id}) does not have a successful charge to refund.`, param: "payment_intent" }, true);
  }
  const left = intent.amountReceived - intent.amountRefunded;
  if (left <= 0) {
    return errorAnswer(400, { type: "invalid_request_error", code: "charge_already_refunded", message: `Charge ${intent.latestCharge} has already been refunded.`, param: "charge" }, true);
  }
  const amount = form.amount === undefined ? left : Number(form.amount);
  if (amount < 1) return invalidParam("This value must be greater than or equal to 1.", "amount", "parameter_invalid_integer");
  if (amount > left) {
    // Stripe gives this refusal no code: only the param and the message.
    const message = `Refund amount (${money(amount, intent.currency)}) is greater than unrefunded amount on charge (${money(left, intent.currency)})`;
    return errorAnswer(400, { type: "invalid_request_error", message, param: "amount" }, true);
  }
  // A refund of the failing test card is pending when created and failed from then on, its
  // money back on the payment: as Stripe's, whose failure comes after the answer.
  const failure = intent.methodName === null ? undefined : REFUND_FAILS[intent.methodName];
  if (failure === undefined) intent.amountRefunded += amount;
  const refund = {
    id: newId("re"),
    amount,
    currency: intent.currency,
    charge: intent.latestCharge,
    paymentIntent: intent.id,
    created: nowSeconds(),
    metadata: metadataOf(form.metadata),
    reason: typeof form.reason === "string" ? form.reason : null,
    balanceTransaction: newId("txn"),
    idempotencyKey: ctx.idempotencyKey,
    status: failure === undefined ? "succeeded" : "failed",
    failureReason: failure ?? null,
  };
  store.refunds.set(refund.id, refund);
  return { status: 200, body: refundJson(refund, failure === undefined ? "succeeded" : "pending"), stored: true };
}

const LIST_SPEC: ParamSpec = {
  payment_intent: "string",
  charge: "string",
  limit: "integer",
  starting_after: "string",
  ending_before: "string",
};

// Stripe's page size: 10 unless the call names one, from 1 to 100.
const DEFAULT_PAGE = 10;
const MAX_PAGE = 100;

/**
 * GET /v1/refunds: the refunds, newest first, optionally of one PaymentIntent or charge, a page
 * at a time as Stripe pages a list (`limit`, then `starting_after` the last id seen, or
 * `ending_before` the first; `has_more` when a page follows).
 */
export function listRefunds(store: Store, query: FormObject): ApiAnswer {
  const wrong = checkParams(query, LIST_SPEC);
  if (wrong) return wrong;
  const limit = query.limit === undefined ? DEFAULT_PAGE : Number(query.limit);
  if (limit < 1 || limit > MAX_PAGE) return invalidParam(`Invalid limit: must be between 1 and ${MAX_PAGE}`, "limit");
  const all = [...store.refunds.values()]
    .filter((refund) => (typeof query.payment_intent !== "string" || refund.paymentIntent === query.payment_intent) && (typeof query.charge !== "string" || refund.charge === query.charge))
    .reverse();
  const after = typeof query.starting_after === "string" ? query.starting_after : undefined;
  const before = typeof query.ending_before === "string" ? query.ending_before : undefined;
  const cursor = after ?? before;
  const at = cursor === undefined ? -1 : all.findIndex((refund) => refund.id === cursor);
  if (cursor !== undefined && !store.refunds.has(cursor)) return noSuch("refund", cursor, after !== undefined ? "starting_after" : "ending_before", 400);
  const page = before !== undefined ? all.slice(Math.max(0, at - limit), Math.max(0, at)) : all.slice(at + 1, at + 1 + limit);
  const hasMore = before !== undefined ? at - limit > 0 : at + 1 + limit < all.length;
  return { status: 200, body: { object: "list", data: page.map((refund) => refundJson(refund)), has_more: hasMore, url: "/v1/refunds" }, stored: false };
}

export function retrieveRefund(store: Store, id: string, query: FormObject): ApiAnswer {
  const refund = store.refunds.get(id);
  if (!refund) return noSuch("refund", id, "refund", 404);
  return checkParams(query, {}) ?? { status: 200, body: refundJson(refund), stored: false };
}

/** The test method a refund call concerns, for fault rules that name one. */
export function refundMethodName(store: Store, refundId: string | undefined, form: FormObject): string | null {
  const intentId = refundId ? store.refunds.get(refundId)?.paymentIntent : typeof form.payment_intent === "string" ? form.payment_intent : undefined;
  if (intentId) return store.intents.get(intentId)?.methodName ?? null;
  if (typeof form.charge === "string") return byCharge(store, form.charge)?.methodName ?? null;
  return null;
}

function checkReason(form: FormObject): ApiAnswer | undefined {
  const reason = form.reason;
  if (typeof reason === "string" && !REASONS.has(reason)) return invalidParam(`Invalid reason: must be one of ${[...REASONS].join(", ")}`, "reason");
  return undefined;
}

function intentToRefund(store: Store, form: FormObject): { intent: IntentRecord } | ApiAnswer {
  const intentId = form.payment_intent;
  const chargeId = form.charge;
  if (typeof intentId === "string") {
    const intent = store.intents.get(intentId);
    if (!intent) return noSuch("payment_intent", intentId, "payment_intent", 400);
    if (typeof chargeId === "string" && chargeId !== intent.latestCharge) return invalidParam(`Charge ${chargeId} does not belong to PaymentIntent ${intentId}.`, "charge");
    return { intent };
  }
  if (typeof chargeId === "string") {
    const intent = byCharge(store, chargeId);
    return intent ? { intent } : noSuch("charge", chargeId, "charge", 400);
  }
  return invalidParam("One of the following params should be provided for this request: payment_intent or charge.", "payment_intent", "parameter_missing");
}

function byCharge(store: Store, chargeId: string): IntentRecord | undefined {
  for (const intent of store.intents.values()) if (intent.latestCharge === chargeId && intent.status === "succeeded") return intent;
  return undefined;
}

function money(amount: number, currency: string): string {
  return currency === "usd" ? `$${(amount / 100).toFixed(2)}` : `${amount} ${currency.toUpperCase()}`;
}

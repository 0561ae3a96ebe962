// PaymentIntents: create (optionally confirming), confirm, retrieve, capture, cancel,
// increment_authorization. A confirmation with a test card that succeeds moves the amount at
// once (automatic capture), or with capture_method=manual authorizes it (`requires_capture`,
// amount_capturable), raised by incremental authorizations when the creation asked for them,
// until a capture of up to that amount (the rest released) or a cancel; a declining card leaves the
// intent `requires_payment_method` and answers Stripe's 402 card_error.
import { checkParams, errorAnswer, invalidParam, MAX_AMOUNT, metadataOf, noSuch, type ApiAnswer, type ParamSpec } from "./errors.ts";
import { formList, type FormObject } from "./form.ts";
import { newId, nowSeconds } from "./ids.ts";
import { DECLINE_MESSAGES, intentJson, newIntentSecret, paymentMethodJson, TEST_METHODS, type AutomaticMethods, type IntentRecord, type Store } from "./store.ts";

export interface CallContext {
  readonly idempotencyKey: string | null;
  /** The call's Stripe-Version (the package pins one): some parameters depend on it. */
  readonly apiVersion: string;
}

// From this API version (endive), payment_method_types is no longer writable on PaymentIntents.
const PAYMENT_METHOD_TYPES_REMOVED_IN = "2026-09-30";

const CONFIRM_SPEC: ParamSpec = {
  payment_method: "string",
  return_url: "string",
  off_session: "string",
  error_on_requires_action: "boolean",
  receipt_email: "string",
};

const CREATE_SPEC: ParamSpec = {
  ...CONFIRM_SPEC,
  amount: "integer",
  currency: "string",
  confirm: "boolean",
  metadata: "metadata",
  description: "string",
  payment_method_types: "list",
  allowed_payment_method_types: "list",
  excluded_payment_method_types: "list",
  automatic_payment_methods: { enabled: "boolean", allow_redirects: "string" },
  capture_method: "string",
  payment_method_options: { card: { request_incremental_authorization: "string" } },
  statement_descriptor: "string",
  statement_descriptor_suffix: "string",
};

const RETRIEVE_SPEC: ParamSpec = { client_secret: "string" };

// Stripe's smallest charge per currency, in minor units (about 50 US cents); 50 for the rest.
const MINIMUM_AMOUNTS: Readonly<Record<string, number>> = { usd: 50, eur: 50, gbp: 30, jpy: 50, cad: 50, aud: 50, chf: 50 };
const DEFAULT_MINIMUM_AMOUNT = 50;
const SUPPORTED_CAPTURE = new Set(["automatic", "automatic_async", "manual"]);
const CAPTURE_SPEC: ParamSpec = { amount_to_capture: "integer", metadata: "metadata" };
const CANCEL_SPEC: ParamSpec = { cancellation_reason: "string" };
const INCREMENT_SPEC: ParamSpec = { amount: "integer", description: "string", metadata: "metadata", statement_descriptor: "string" };
const INCREMENTAL_REQUESTS = new Set(["if_available", "never"]);
// Stripe's documented cancellation reasons, and the statuses a PaymentIntent may be canceled in.
const CANCELLATION_REASONS = new Set(["duplicate", "fraudulent", "requested_by_customer", "abandoned"]);
const CANCELABLE = ["requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing"];

const REDIRECT_MESSAGE =
  "This PaymentIntent is configured to accept payment methods enabled in your Dashboard, some of which may require a full page redirect to succeed. If you do not want to accept redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and `automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and Payment Intents.";

export function createIntent(store: Store, form: FormObject, ctx: CallContext): ApiAnswer {
  const wrong = checkParams(form, CREATE_SPEC) ?? checkVersioned(form, ctx.apiVersion) ?? checkAmount(form) ?? checkCreateOptions(store, form);
  if (wrong) return wrong;
  const amount = Number(form.amount);
  const methodName = typeof form.payment_method === "string" ? store.testMethodName(form.payment_method) ?? null : null;
  const types = formList(form.payment_method_types);
  const allowed = formList(form.allowed_payment_method_types);
  const id = newId("pi");
  const intent: IntentRecord = {
    id,
    secret: newIntentSecret(id),
    amount,
    currency: String(form.currency).toLowerCase(),
    created: nowSeconds(),
    description: typeof form.description === "string" ? form.description : null,
    paymentMethodTypes: types ?? ["card"],
    allowedTypes: allowed ?? null,
    automatic: types || allowed ? null : automaticMethods(form),
    captureMethod: typeof form.capture_method === "string" ? form.capture_method : "automatic_async",
    incrementalAuthorization: incrementalRequestOf(form),
    idempotencyKey: ctx.idempotencyKey,
    metadata: metadataOf(form.metadata),
    status: methodName ? "requires_confirmation" : "requires_payment_method",
    methodId: methodName ? mintMethod(store, methodName) : null,
    methodName,
    latestCharge: null,
    amountReceived: 0,
    amountCapturable: 0,
    canceledAt: null,
    cancellationReason: null,
    amountRefunded: 0,
    confirmations: 0,
    lastPaymentError: null,
  };
  const confirm = form.confirm === "true";
  if (confirm) {
    const refused = confirmRefusal(intent, methodName, form);
    if (refused) return refused;
  }
  store.intents.set(intent.id, intent);
  return confirm && methodName ? charge(store, intent, methodName) : { status: 200, body: intentJson(intent), stored: true };
}

export function confirmIntent(store: Store, id: string, form: FormObject, ctx: CallContext): ApiAnswer {
  const intent = store.intents.get(id);
  if (!intent) return noSuch("payment_intent", id, "intent", 404);
  const wrong = checkVersioned(form, ctx.apiVersion) ?? checkParams(form, CONFIRM_SPEC) ?? checkMethod(store, form);
  if (wrong) return wrong;
  if (intent.status === "succeeded") {
    return unexpectedState(intent, "You cannot confirm this PaymentIntent because it has already succeeded after being previously confirmed.");
  }
  if (intent.status === "requires_capture" || intent.status === "canceled") {
    return unexpectedState(intent, `You cannot confirm this PaymentIntent because it has a status of ${intent.status}.`);
  }
  const methodName = typeof form.payment_method === "string" ? store.testMethodName(form.payment_method) ?? null : intent.status === "requires_confirmation" ? intent.methodName : null;
  const refused = confirmRefusal(intent, methodName, form);
  if (refused) return refused;
  return charge(store, intent, methodName ?? "");
}

/** Captures an authorized intent, all of it or `amount_to_capture` (the rest released), once. */
export function captureIntent(store: Store, id: string, form: FormObject): ApiAnswer {
  const intent = store.intents.get(id);
  if (!intent) return noSuch("payment_intent", id, "intent", 404);
  const wrong = checkParams(form, CAPTURE_SPEC);
  if (wrong) return wrong;
  if (intent.status !== "requires_capture") {
    return unexpectedState(intent, `This PaymentIntent could not be captured because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.`);
  }
  const amount = form.amount_to_capture === undefined ? intent.amountCapturable : Number(form.amount_to_capture);
  if (amount < 1 || amount > intent.amountCapturable) {
    return invalidParam(`The amount to capture must be between 1 and the amount capturable (${intent.amountCapturable}).`, "amount_to_capture", "amount_too_large");
  }
  intent.status = "succeeded";
  intent.amountReceived = amount;
  intent.amountCapturable = 0;
  if (form.metadata !== undefined) intent.metadata = { ...intent.metadata, ...metadataOf(form.metadata) };
  return { status: 200, body: intentJson(intent), stored: true };
}

/** Cancels an intent not yet succeeded (an authorization is released); a succeeded or canceled one cannot be. */
export function cancelIntent(store: Store, id: string, form: FormObject): ApiAnswer {
  const intent = store.intents.get(id);
  if (!intent) return noSuch("payment_intent", id, "intent", 404);
  const wrong = checkParams(form, CANCEL_SPEC);
  if (wrong) return wrong;
  const reason = typeof form.cancellation_reason === "string" ? form.cancellation_reason : null;
  if (reason !== null && !CANCELLATION_REASONS.has(reason)) return invalidParam(`Invalid cancellation_reason: must be one of ${[...CANCELLATION_REASONS].join(", ")}`, "cancellation_reason");
  if (!CANCELABLE.includes(intent.status)) {
    return unexpectedState(intent, `You cannot cancel this PaymentIntent because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be canceled: ${CANCELABLE.join(", ")}.`);
  }
  intent.status = "canceled";
  intent.amountCapturable = 0;
  intent.canceledAt = nowSeconds();
  intent.cancellationReason = reason;
  return { status: 200, body: intentJson(intent), stored: true };
}

/**
 * An incremental authorization, as Stripe documents it: only a PaymentIntent in requires_capture
 * whose creation asked for it (payment_method_options[card][request_incremental_authorization]=
 * if_available) is incremented, to `amount`, the new total, greater than the current one; the
 * answer is the PaymentIntent with that amount, all of it capturable. Stripe's documents name no
 * code for a payment that did not ask: the simulator's is its own.
 */
export function incrementAuthorization(store: Store, id: string, form: FormObject): ApiAnswer {
  const intent = store.intents.get(id);
  if (!intent) return noSuch("payment_intent", id, "intent", 404);
  const wrong = checkParams(form, INCREMENT_SPEC);
  if (wrong) return wrong;
  if (form.amount === undefined) return invalidParam("Missing required param: amount.", "amount", "parameter_missing");
  if (intent.status !== "requires_capture") {
    return unexpectedState(intent, `This PaymentIntent's authorization could not be incremented because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be incremented: requires_capture.`);
  }
  if (intent.incrementalAuthorization !== "if_available") {
    return invalidParam("This PaymentIntent is not eligible for incremental authorization: it was not requested at its creation (payment_method_options[card][request_incremental_authorization]).", "amount", "incremental_authorization_not_available");
  }
  const amount = Number(form.amount);
  if (amount <= intent.amount) return invalidParam(`The amount must be greater than the PaymentIntent's current amount (${intent.amount}).`, "amount", "amount_too_small");
  intent.amount = amount;
  intent.amountCapturable = amount;
  if (form.metadata !== undefined) intent.metadata = { ...intent.metadata, ...metadataOf(form.metadata) };
  return { status: 200, body: intentJson(intent), stored: true };
}

export function retrieveIntent(store: Store, id: string, query: FormObject): ApiAnswer {
  const intent = store.intents.get(id);
  if (!intent) return noSuch("payment_intent", id, "intent", 404);
  return checkParams(query, RETRIEVE_SPEC) ?? { status: 200, body: intentJson(intent), stored: false };
}

/** The test method a call about a PaymentIntent concerns, for fault rules that name one. */
export function intentMethodName(store: Store, id: string | undefined, form: FormObject): string | null {
  if (typeof form.payment_method === "string") return store.testMethodName(form.payment_method) ?? form.payment_method;
  return id ? store.intents.get(id)?.methodName ?? null : null;
}

/** What the creation asked of incremental authorization; null when it did not say. */
function incrementalRequestOf(form: FormObject): string | null {
  const options = form.payment_method_options;
  const card = typeof options === "object" ? options.card : undefined;
  const asked = typeof card === "object" ? card.request_incremental_authorization : undefined;
  return typeof asked === "string" ? asked : null;
}

function checkAmount(form: FormObject): ApiAnswer | undefined {
  for (const name of ["amount", "currency"]) {
    if (form[name] === undefined) return invalidParam(`Missing required param: ${name}.`, name, "parameter_missing");
  }
  const currency = String(form.currency).toLowerCase();
  if (!/^[a-z]{3}$/.test(currency)) return invalidParam(`Invalid currency: ${String(form.currency)}`, "currency");
  const amount = Number(form.amount);
  const minimum = MINIMUM_AMOUNTS[currency] ?? DEFAULT_MINIMUM_AMOUNT;
  if (amount < minimum) return invalidParam(`Amount must be at least ${minimum} ${currency} minor units`, "amount", "amount_too_small");
  if (amount > MAX_AMOUNT) return invalidParam(`Amount must be no more than ${MAX_AMOUNT} ${currency} minor units`, "amount", "amount_too_large");
  return undefined;
}

/** Parameters whose meaning depends on the API version: payment_method_types is gone from endive on. */
function checkVersioned(form: FormObject, apiVersion: string): ApiAnswer | undefined {
  if (form.payment_method_types !== undefined && apiVersion.slice(0, 10) >= PAYMENT_METHOD_TYPES_REMOVED_IN) {
    const message = "payment_method_types is no longer supported on this API version. Use allowed_payment_method_types or excluded_payment_method_types, or dynamic payment methods.";
    return invalidParam(message, "payment_method_types", "payment_method_types_no_longer_supported");
  }
  return undefined;
}

function checkCreateOptions(store: Store, form: FormObject): ApiAnswer | undefined {
  const capture = form.capture_method;
  if (typeof capture === "string" && !SUPPORTED_CAPTURE.has(capture)) {
    return invalidParam(`capture_method "${capture}" is not supported by the simulator`, "capture_method");
  }
  const incremental = incrementalRequestOf(form);
  if (incremental !== null && !INCREMENTAL_REQUESTS.has(incremental)) {
    return invalidParam(`Invalid payment_method_options[card][request_incremental_authorization]: must be one of ${[...INCREMENTAL_REQUESTS].join(", ")}`, "payment_method_options[card][request_incremental_authorization]");
  }
  if (form.allowed_payment_method_types !== undefined) {
    const clash = ["payment_method_types", "excluded_payment_method_types", "automatic_payment_methods"].find((name) => form[name] !== undefined);
    if (clash) return invalidParam(`You cannot specify both allowed_payment_method_types and ${clash}.`, clash, "parameters_exclusive");
    // Stripe drops the types that cannot be used; the simulator's only one is card.
    if (!formList(form.allowed_payment_method_types)?.includes("card")) return invalidParam("None of allowed_payment_method_types can be used: the simulator has card only.", "allowed_payment_method_types");
  }
  const types = formList(form.payment_method_types);
  if (types && types.some((type) => type !== "card")) return invalidParam("The simulator accepts payment_method_types of card only.", "payment_method_types");
  return checkMethod(store, form);
}

function checkMethod(store: Store, form: FormObject): ApiAnswer | undefined {
  const method = form.payment_method;
  if (typeof method === "string" && !store.testMethodName(method)) return noSuch("PaymentMethod", method, "payment_method", 400);
  return undefined;
}

function automaticMethods(form: FormObject): AutomaticMethods {
  const given = form.automatic_payment_methods;
  const allow = typeof given === "object" && typeof given.allow_redirects === "string" ? given.allow_redirects : "always";
  return { enabled: true, allow_redirects: allow };
}

/** Why Stripe would refuse to confirm now, before anything is charged: no payment method, or redirects allowed without a return_url. */
function confirmRefusal(intent: IntentRecord, methodName: string | null, form: FormObject): ApiAnswer | undefined {
  if (!methodName) {
    return unexpectedState(intent, "You cannot confirm this PaymentIntent because it's missing a payment method. You can either update the PaymentIntent with a payment method and then confirm it again, or confirm it again directly with a payment method.");
  }
  if (intent.automatic?.enabled && intent.automatic.allow_redirects !== "never" && typeof form.return_url !== "string") {
    return errorAnswer(400, { type: "invalid_request_error", message: REDIRECT_MESSAGE }, false);
  }
  return undefined;
}

function unexpectedState(intent: IntentRecord, message: string): ApiAnswer {
  return errorAnswer(400, { type: "invalid_request_error", code: "payment_intent_unexpected_state", message, payment_intent: intentJson(intent) }, true);
}

/** The confirmation itself: a charge on the test card, which succeeds (money moves) or is declined. */
function charge(store: Store, intent: IntentRecord, methodName: string): ApiAnswer {
  const method = TEST_METHODS[methodName];
  if (!method) throw new Error(`no test method ${methodName}`);
  const methodId = intent.methodId && store.methods.get(intent.methodId) === methodName ? intent.methodId : mintMethod(store, methodName);
  intent.latestCharge = newId("ch");
  intent.methodName = methodName;
  if (method.decline) {
    const error = {
      type: "card_error" as const,
      code: "card_declined",
      decline_code: method.decline,
      message: DECLINE_MESSAGES[method.decline],
      charge: intent.latestCharge,
      doc_url: "https://stripe.com/docs/error-codes/card-declined",
      payment_method: paymentMethodJson(methodId, method, nowSeconds()),
    };
    intent.status = "requires_payment_method";
    intent.methodId = null;
    intent.lastPaymentError = error;
    return errorAnswer(402, { ...error, payment_intent: intentJson(intent) }, true);
  }
  intent.methodId = methodId;
  // Manual capture authorizes only: the money moves at the capture.
  if (intent.captureMethod === "manual") {
    intent.status = "requires_capture";
    intent.amountCapturable = intent.amount;
  } else {
    intent.status = "succeeded";
    intent.amountReceived = intent.amount;
  }
  intent.confirmations += 1;
  intent.lastPaymentError = null;
  return { status: 200, body: intentJson(intent), stored: true };
}

/** A test payment method used in a call becomes a PaymentMethod of its own, as on Stripe. */
function mintMethod(store: Store, methodName: string): string {
  const id = newId("pm");
  store.methods.set(id, methodName);
  return id;
}

// One API call, from its bytes to what the server does: answer, hang or drop. Order as on
// Stripe: authentication, the route, then the idempotency layer, then the endpoint; faults
// hit where the rule says (before the effect, after it, instead of the answer).
import { authenticate } from "./auth.ts";
import { errorAnswer, INTERNAL_ERROR, type ApiAnswer } from "./errors.ts";
import type { FaultSet } from "./faults.ts";
import { canonical, parseForm, type FormObject } from "./form.ts";
import { newRequestId } from "./ids.ts";
import { IdempotencyKeys, type StoredAnswer } from "./idempotency.ts";
import { cancelIntent, captureIntent, confirmIntent, createIntent, incrementAuthorization, intentMethodName, retrieveIntent } from "./intents.ts";
import { createRefund, listRefunds, refundMethodName, retrieveRefund } from "./refunds.ts";
import { Store } from "./store.ts";
import type { SimFaultKind, SimOperation, SimRequestEntry } from "./types.ts";
import { RequestLog } from "./request-log.ts";

// The Stripe-Version answered when the call names none: the one the stripe package pins.
const DEFAULT_STRIPE_VERSION = "2026-10-28.endive";
// Stripe's limit on an Idempotency-Key.
const MAX_KEY_CHARS = 255;

export interface Call {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly body: string;
  header(name: string): string | undefined;
  /** Resolves when the caller's connection closes (it gave up, or the answer went out). */
  readonly closed: Promise<void>;
  /** True once the caller has gone: an answer now reaches nobody. */
  gone(): boolean;
}

export type Reply = { readonly kind: "answer"; readonly status: number; readonly body: string; readonly headers: Record<string, string> } | { readonly kind: "hang" } | { readonly kind: "drop" };

interface Route {
  readonly op: SimOperation;
  readonly id: string | undefined;
  /** The route template, so that one key reused on another endpoint is told apart. */
  readonly endpoint: string;
}

const ALL_FAULTS: ReadonlySet<SimFaultKind> = new Set(["500-before", "500-after", "hang", "drop-after"]);
// A call answered from the store runs nothing: only faults of the connection can hit it.
const CONNECTION_FAULTS: ReadonlySet<SimFaultKind> = new Set(["hang", "drop-after"]);

/** One call on its way through: what its answer needs. */
interface InFlight {
  readonly call: Call;
  readonly requestId: string;
  readonly key: string | null;
  readonly entry: SimRequestEntry;
}

export class Api {
  readonly store = new Store();
  readonly keys: IdempotencyKeys;
  readonly log = new RequestLog();

  constructor(private readonly faults: FaultSet, private readonly latencyMs: () => number, now: () => number = Date.now) {
    this.keys = new IdempotencyKeys(now);
  }

  async handle(call: Call): Promise<Reply> {
    const requestId = newRequestId();
    const route = routeOf(call.method, call.path);
    const key = call.method === "POST" ? call.header("idempotency-key") ?? null : null;
    const entry = this.log.add({ requestId, method: call.method, path: call.path, op: route?.op ?? null, idempotencyKey: key, state: "in-flight", status: null, replayed: false });
    const reply = await this.reply({ call, requestId, key, entry }, route);
    entry.state = reply.kind === "drop" ? "dropped" : reply.kind === "hang" || call.gone() ? "abandoned" : "answered";
    return reply;
  }

  private async reply(flight: InFlight, route: Route | undefined): Promise<Reply> {
    const { call, key } = flight;
    const auth = authenticate(call.header("authorization"));
    if (!auth.ok) return this.paced(flight, auth.answer, { "WWW-Authenticate": 'Basic realm="Stripe"' });
    if (!route) return this.paced(flight, errorAnswer(404, { type: "invalid_request_error", message: `Unrecognized request URL (${call.method}: ${call.path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.` }, false));
    const form = parseForm(call.method === "POST" ? call.body : call.query);
    if (!form) return this.paced(flight, errorAnswer(400, { type: "invalid_request_error", message: "Invalid request: the parameters could not be parsed." }, false));
    if (key !== null && (key.length === 0 || key.length > MAX_KEY_CHARS)) {
      return this.paced(flight, errorAnswer(400, { type: "invalid_request_error", message: `Invalid Idempotency-Key: it must be 1 to ${MAX_KEY_CHARS} characters long.` }, false));
    }
    const method = route.op === "refund" || route.op === "retrieveRefund" || route.op === "listRefunds" ? refundMethodName(this.store, route.id, form) : intentMethodName(this.store, route.id, form);
    if (key === null) return this.run(flight, route, form, method, undefined);
    const begun = this.keys.begin(auth.apiKey, key, route.endpoint, `${call.method} ${call.path} ${canonical(form)}`);
    switch (begun.kind) {
      case "fresh":
        return this.run(flight, route, form, method, begun.finish);
      case "replay":
        return this.replay(flight, route, method, begun.answer);
      case "mismatch":
        return this.paced(flight, mismatch(key, begun.otherEndpoint));
      case "in-flight":
        return this.paced(flight, keyInUse());
    }
  }

  /** A call that runs the endpoint (a first call with its key, or one without a key). */
  private async run(flight: InFlight, route: Route, form: FormObject, method: string | null, finish: ((answer: StoredAnswer | undefined) => void) | undefined): Promise<Reply> {
    const fault = this.faults.pick(route.op, method, ALL_FAULTS);
    if (fault === "hang") return this.hang(flight, () => finish?.(undefined));
    await this.pace();
    let answer = fault === "500-before" ? errorAnswer(500, INTERNAL_ERROR, true) : this.execute(route, form, flight);
    if (fault === "500-after" && answer.stored) answer = errorAnswer(500, INTERNAL_ERROR, true);
    const body = JSON.stringify(answer.body, null, 2);
    finish?.(answer.stored ? { status: answer.status, body, requestId: flight.requestId } : undefined);
    const reply = this.answer(flight, answer.status, body, {});
    return fault === "drop-after" ? { kind: "drop" } : reply;
  }

  private async replay(flight: InFlight, route: Route, method: string | null, stored: StoredAnswer): Promise<Reply> {
    const fault = this.faults.pick(route.op, method, CONNECTION_FAULTS);
    if (fault === "hang") return this.hang(flight, () => {});
    await this.pace();
    flight.entry.replayed = true;
    const reply = this.answer(flight, stored.status, stored.body, { "Idempotent-Replayed": "true", "Original-Request": stored.requestId });
    return fault === "drop-after" ? { kind: "drop" } : reply;
  }

  private execute(route: Route, form: FormObject, flight: InFlight): ApiAnswer {
    const ctx = { idempotencyKey: flight.key, apiVersion: stripeVersion(flight.call) };
    switch (route.op) {
      case "create":
        return createIntent(this.store, form, ctx);
      case "confirm":
        return confirmIntent(this.store, route.id ?? "", form, ctx);
      case "retrieve":
        return retrieveIntent(this.store, route.id ?? "", form);
      case "capture":
        return captureIntent(this.store, route.id ?? "", form);
      case "cancel":
        return cancelIntent(this.store, route.id ?? "", form);
      case "incrementAuthorization":
        return incrementAuthorization(this.store, route.id ?? "", form);
      case "refund":
        return createRefund(this.store, form, ctx);
      case "retrieveRefund":
        return retrieveRefund(this.store, route.id ?? "", form);
      case "listRefunds":
        return listRefunds(this.store, form);
    }
  }

  /** Holds the call, its key in flight, until the caller gives up. */
  private async hang(flight: InFlight, release: () => void): Promise<Reply> {
    flight.entry.state = "hung";
    await flight.call.closed;
    release();
    return { kind: "hang" };
  }

  private answer(flight: InFlight, status: number, body: string, extra: Record<string, string>): Reply {
    flight.entry.status = status;
    const headers: Record<string, string> = {
      "Content-Type": "application/json",
      "Request-Id": flight.requestId,
      "Stripe-Version": stripeVersion(flight.call),
      ...(flight.key === null ? {} : { "Idempotency-Key": flight.key }),
      // A 500 is kept under its key, so resending it would only get it back: Stripe says not to.
      ...(status >= 500 ? { "Stripe-Should-Retry": "false" } : {}),
      ...extra,
    };
    return { kind: "answer", status, body, headers };
  }

  /** An answer that runs nothing: after the latency, as every answer. */
  private async paced(flight: InFlight, answer: ApiAnswer, extra: Record<string, string> = {}): Promise<Reply> {
    await this.pace();
    return this.answer(flight, answer.status, JSON.stringify(answer.body, null, 2), extra);
  }

  /** The latency in force, as a real delay before the answer: pacing, not synchronization. */
  private async pace(): Promise<void> {
    const ms = this.faults.latency(this.latencyMs());
    if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
  }
}

function stripeVersion(call: Call): string {
  return call.header("stripe-version") ?? DEFAULT_STRIPE_VERSION;
}

function routeOf(method: string, path: string): Route | undefined {
  const parts = path.split("/").slice(1).map((part) => safeDecode(part));
  if (parts[0] !== "v1" || parts.some((part) => part === undefined)) return undefined;
  const [, resource, id, action, ...rest] = parts as string[];
  if (rest.length > 0 || id === "") return undefined;
  if (resource === "payment_intents") {
    if (method === "POST" && id === undefined) return { op: "create", id, endpoint: "POST /v1/payment_intents" };
    if (method === "GET" && id !== undefined && action === undefined) return { op: "retrieve", id, endpoint: "GET /v1/payment_intents/:id" };
    if (method === "POST" && id !== undefined && action === "confirm") return { op: "confirm", id, endpoint: "POST /v1/payment_intents/:id/confirm" };
    if (method === "POST" && id !== undefined && action === "capture") return { op: "capture", id, endpoint: "POST /v1/payment_intents/:id/capture" };
    if (method === "POST" && id !== undefined && action === "cancel") return { op: "cancel", id, endpoint: "POST /v1/payment_intents/:id/cancel" };
    if (method === "POST" && id !== undefined && action === "increment_authorization") {
      return { op: "incrementAuthorization", id, endpoint: "POST /v1/payment_intents/:id/increment_authorization" };
    }
  }
  if (resource === "refunds" && action === undefined) {
    if (method === "POST" && id === undefined) return { op: "refund", id, endpoint: "POST /v1/refunds" };
    if (method === "GET" && id === undefined) return { op: "listRefunds", id, endpoint: "GET /v1/refunds" };
    if (method === "GET" && id !== undefined) return { op: "retrieveRefund", id, endpoint: "GET /v1/refunds/:id" };
  }
  return undefined;
}

function safeDecode(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined;
  }
}

function mismatch(key: string, otherEndpoint: boolean): ApiAnswer {
  const message = otherEndpoint
    ? `Keys for idempotent requests can only be used for the same endpoint they were first used for. Try using a key other than '${key}' if you meant to execute a different request.`
    : `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`;
  return errorAnswer(400, { type: "idempotency_error", message }, false);
}

function keyInUse(): ApiAnswer {
  const message = "There is currently another in-progress request using this Idempotent Key (probably because of a timeout). Please try again later.";
  return errorAnswer(409, { type: "invalid_request_error", code: "idempotency_key_in_use", message }, false);
}

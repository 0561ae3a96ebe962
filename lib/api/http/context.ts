// What a request carries through Elysia's lifecycle in Elysia's context: its dependencies (one
// fixed set in the server, the request's own in the worker) and its trail, a fresh one per
// request (onRequest), of which its log line, histogram sample and span are made.
import { Elysia } from "elysia";
import { SpanKind, type Span } from "@opentelemetry/api";
import type { TSchema } from "@sinclair/typebox";
import type { Logger } from "../../platform/log.ts";
import type { Sql } from "../../platform/db.ts";
import { UNMATCHED_ROUTE } from "../../platform/http-metrics.ts";
import { pathOf } from "../../platform/runtime.ts";
import { contextOf, tracer, tracingOn } from "../../platform/trace-context.ts";
import type { IdempotencyCore } from "../../idempotency/run.ts";
import type { OutcomeKind } from "../../idempotency/outcome.ts";
import type { Authenticator } from "../auth.ts";
import type { ApiMetrics } from "../metrics.ts";
import type { Admission } from "../admission.ts";
import type { Readiness } from "../readiness.ts";

export interface RequestDeps {
  readonly sql: Sql;
  readonly core: IdempotencyCore;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly counters: ApiMetrics;
  readonly admission: Admission;
  readonly readiness: Readiness;
}

/** What a request's log line adds, in the order learnt: never the token or the raw key. */
export interface LogFields {
  tenant?: string;
  authFailure?: string;
  outcome?: OutcomeKind;
  /** The key's keyHash, made when the line is written (redact.ts keyHashField). */
  keyHash?: { toJSON(): string };
  /** What made a 5xx: the database away, a time bound tripped, or a bug. */
  error?: string;
}

/** What an operation's handler (answers.ts) is given of a request Elysia has checked. */
export interface RequestContext {
  readonly request: Request;
  readonly params: Readonly<Record<string, string>>;
  /** Read as strict JSON and checked against the route's body schema. */
  readonly body: unknown;
  readonly tenant: string;
  readonly deps: RequestDeps;
  readonly fields: LogFields;
  readonly span?: Span;
}

// What each path parameter names, for the problem of an id that is not a UUID.
const PARAM_NOUNS: Readonly<Record<string, string>> = { id: "charge", refundId: "refund" };

export function nounOf(name: string): string {
  return PARAM_NOUNS[name] ?? name;
}

/** The routes behind a bearer token: everything under /charges, matched or not. */
export function needsToken(path: string): boolean {
  return path === "/charges" || path.startsWith("/charges/");
}

/** A body route's checks (checks.ts bodyParser), for answering its refusals in their order. */
export interface BodyChecks {
  readonly body: TSchema;
  /** The value of an empty body (no bytes at all): `{}` when no field is required, else none. */
  readonly empty: unknown;
}

/** One request's record; answeredAt, since onAfterResponse runs later than the answer leaves. */
export class RequestTrail {
  readonly started = performance.now();
  readonly fields: LogFields = {};
  answeredAt: number | undefined;
  status: number | undefined;
  // Where it is counted in flight (in-flight.ts), so counted out of once answered.
  admitted = false;
  tenantIn: string | undefined = undefined;
  keyIn: string | undefined = undefined;
  span: Span | undefined;
  /** The token's and the rate's verdict, taken once (authentication.ts admitOnce). */
  admission: Promise<string | Response> | undefined;
  body: BodyChecks | undefined;

  answer(response: Response): Response {
    this.answeredAt = performance.now();
    this.status = response.status;
    return response;
  }
}

/** `deps` and a `trail` per request; named, so each group of routes `use`s it and Elysia applies it once. */
export function requestContext(deps: RequestDeps) {
  return (
    new Elysia({ name: "request-context" })
      .decorate("deps", deps)
      // A placeholder for the types: onRequest gives every request its own, before anything else runs.
      .decorate("trail", new RequestTrail())
      .onRequest((ctx) => {
        ctx.trail = new RequestTrail();
        if (tracingOn()) ctx.trail.span = serverSpan(ctx.request);
      })
      .as("global")
  );
}

export type RequestContextPlugin = ReturnType<typeof requestContext>;

/**
 * The request's OpenTelemetry server span, the child of the caller's traceparent; its own is
 * written onto the key and the outbox row, so the relay's and subscriber's spans join the trace.
 */
function serverSpan(request: Request): Span {
  const attributes = { "http.request.method": request.method, "url.path": pathOf(request.url) };
  return tracer().startSpan(request.method, { kind: SpanKind.SERVER, attributes }, contextOf(request.headers.get("traceparent")));
}

/** The route field of a request: the template Elysia matched, or one value when none did. */
export function routeOf(route: string | undefined | null): string {
  return route || UNMATCHED_ROUTE;
}

// What a request carries through Elysia's lifecycle in Elysia's context: its dependencies (one
// fixed set in the server, the request's own in the worker) and the trail its log line and
// histogram sample are made of, a fresh one per request (onRequest).
import { Elysia } from "elysia";
import type { TSchema } from "@sinclair/typebox";
import type { Logger } from "../../platform/log.ts";
import type { Sql } from "../../platform/db.ts";
import { UNMATCHED_ROUTE } from "../../platform/http-metrics.ts";
import type { IdempotencyCore } from "../../idempotency/run.ts";
import type { Authenticator } from "../auth.ts";
import type { ApiMetrics } from "../metrics.ts";
import type { Admission } from "../admission.ts";
import type { Readiness } from "../readiness.ts";
import type { OutcomeKind } from "../../idempotency/outcome.ts";
import type { Span } from "@opentelemetry/api";
import { tracingOn } from "../../platform/trace-context.ts";
import { serverSpan } from "./trace.ts";

/** What serving one request takes: one fixed set in the server, the request's own in the worker. */
export interface RequestDeps {
  readonly sql: Sql;
  readonly core: IdempotencyCore;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly counters: ApiMetrics;
  readonly admission: Admission;
  readonly readiness: Readiness;
}

/**
 * What a request's log line adds: never the token or the raw key. Filled in place as the
 * request goes (its fields, and so the line's, in the order they were learnt).
 */
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
  /** The body, read as strict JSON and checked against the route's body schema. */
  readonly body: unknown;
  /** The authenticated tenant. */
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

/** What a body route's checks are, kept on its trail for answering its refusals in their order (checks.ts). */
export interface BodyChecks {
  readonly body: TSchema;
  /** The value of an empty body (no bytes at all): `{}` when no field is required, else none. */
  readonly empty: unknown;
}

/**
 * One request's own record: when it began, what its log line adds, and when and with what it
 * was answered (onAfterResponse runs after the answer has left, later than its end).
 */
export class RequestTrail {
  readonly started = performance.now();
  readonly fields: LogFields = {};
  answeredAt: number | undefined;
  status: number | undefined;
  /** Counted in flight (admission.ts), so counted out once answered. */
  admitted = false;
  /** The tenant whose share it is counted in, so counted out of once answered. */
  tenantIn: string | undefined = undefined;
  /** The tenant's key whose places it is counted in, so counted out of once answered. */
  keyIn: string | undefined = undefined;
  span: Span | undefined;
  /** The token's and the rate's verdict, taken once (authentication.ts admitOnce): the tenant, or the refusal. */
  admission: Promise<string | Response> | undefined;
  /** A body route's checks (checks.ts bodyParser), for answering a refusal in their order. */
  body: BodyChecks | undefined;

  answer(response: Response): Response {
    this.answeredAt = performance.now();
    this.status = response.status;
    return response;
  }
}

/**
 * The context every route and hook of the API reads: `deps` and a `trail` per request. Named,
 * so each group of routes `use`s it for its types and Elysia applies it once.
 */
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

/** The route field of a request: the template Elysia matched, or one value when none did. */
export function routeOf(route: string | undefined | null): string {
  return route || UNMATCHED_ROUTE;
}

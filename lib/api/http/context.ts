// What a request carries in Elysia's context: its dependencies (the worker's are the request's own)
// and its trail, fresh per request, of which its log line, histogram sample and span are made.
import { Elysia } from "elysia";
import { SpanKind, type Span } from "@opentelemetry/api";
import type { TSchema } from "@sinclair/typebox";
import type { Logger } from "../../platform/log.ts";
import type { Sql } from "../../platform/db.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../../platform/http-metrics.ts";
import { pathOf } from "../../platform/runtime.ts";
import { contextOf, endSpan, tracer, tracingOn } from "../../platform/trace-context.ts";
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
  keyHash?: { toJSON(): string };
  error?: string;
}

export interface RequestContext {
  readonly request: Request;
  readonly params: Readonly<Record<string, string>>;
  readonly body: unknown;
  readonly tenant: string;
  readonly deps: RequestDeps;
  readonly fields: LogFields;
  readonly span?: Span;
}

const PARAM_NOUNS: Readonly<Record<string, string>> = { id: "charge", refundId: "refund" };

export const nounOf = (name: string): string => PARAM_NOUNS[name] ?? name;

/** A body route's checks, for answering its refusals in their order (checks.ts). */
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
  admitted = false;
  tenantIn: string | undefined = undefined;
  keyIn: string | undefined = undefined;
  span: Span | undefined;
  admission: Promise<string | Response> | undefined;
  body: BodyChecks | undefined;

  answer(response: Response): Response {
    this.answeredAt = performance.now();
    this.status = response.status;
    return response;
  }

  /** Out of the count in flight, once: when answered, or earlier when its refusal is held. */
  countOut(admission: Admission): void {
    if (this.keyIn !== undefined) admission.leaveKey(this.keyIn);
    if (this.tenantIn !== undefined) admission.leaveTenant(this.tenantIn);
    if (this.admitted) admission.leave();
    this.keyIn = this.tenantIn = undefined;
    this.admitted = false;
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

/** The server span, child of the caller's traceparent; its own goes on the key and outbox row. */
function serverSpan(request: Request): Span {
  const attributes = { "http.request.method": request.method, "url.path": pathOf(request.url) };
  return tracer().startSpan(request.method, { kind: SpanKind.SERVER, attributes }, contextOf(request.headers.get("traceparent")));
}

export function routeOf(route: string | undefined | null): string {
  return route || UNMATCHED_ROUTE;
}

/** Once an answer has left: its count out of flight, log line and duration, ended at the answer's stamp. */
export function observability(context: RequestContextPlugin, httpMetrics: HttpServerMetrics | undefined) {
  return new Elysia({ name: "observability" })
    .use(context)
    .onAfterHandle({ as: "global" }, ({ responseValue, trail }) => {
      if (responseValue instanceof Response) trail.answer(responseValue);
    })
    // `set` is not read: a hook that reads it makes Elysia map every answer through it.
    .onAfterResponse({ as: "global" }, ({ request, route, trail, deps }) => {
      trail.countOut(deps.admission);
      const durationMs = (trail.answeredAt ?? performance.now()) - trail.started;
      const status = trail.status ?? 200;
      const name = routeOf(route);
      httpMetrics?.record(request.method, name, status, durationMs / 1000);
      if (trail.span) endServerSpan(trail.span, request.method, name, status, trail.fields.tenant, trail.fields.keyHash?.toJSON());
      const fields = { method: request.method, route: name, status, durationMs: Math.round(durationMs * 100) / 100, ...trail.fields };
      try {
        if (status >= 500) deps.log.error("request", fields);
        else deps.log.info("request", fields);
      } catch (error) {
        deps.log.error("request log failed", { error: String(error) });
      }
    });
}

function endServerSpan(span: Span, method: string, route: string, status: number, tenant: string | undefined, keyHash: string | undefined): void {
  span.updateName(`${method} ${route}`);
  span.setAttributes({ "http.route": route, "http.response.status_code": status });
  if (tenant !== undefined) span.setAttribute("charges.tenant", tenant);
  if (keyHash !== undefined) span.setAttribute("charges.idempotency_key_hash", keyHash);
  endSpan(span, status >= 500 ? String(status) : undefined);
}

// A request as an OpenTelemetry HTTP server span, made only when the process exports traces:
// the child of the caller's traceparent when it sent one, named by the route template once
// Elysia has matched it. Its own traceparent is what the request writes onto its key and
// its outbox row, so the relay's and the subscriber's spans join the same trace.
import { SpanKind, type Span } from "@opentelemetry/api";
import { pathOf } from "../../platform/runtime.ts";
import { contextOf, endSpan, tracer } from "../../platform/trace-context.ts";

export function serverSpan(request: Request): Span {
  return tracer().startSpan(
    request.method,
    { kind: SpanKind.SERVER, attributes: { "http.request.method": request.method, "url.path": pathOf(request.url) } },
    contextOf(request.headers.get("traceparent")),
  );
}

/** Names and ends the span once answered; `tenant` and `keyHash` as the request's log line has them. */
export function endServerSpan(span: Span, method: string, route: string, status: number, tenant: string | undefined, keyHash: string | undefined): void {
  span.updateName(`${method} ${route}`);
  span.setAttributes({ "http.route": route, "http.response.status_code": status });
  if (tenant !== undefined) span.setAttribute("charges.tenant", tenant);
  if (keyHash !== undefined) span.setAttribute("charges.idempotency_key_hash", keyHash);
  endSpan(span, status >= 500 ? String(status) : undefined);
}

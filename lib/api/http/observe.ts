// Once an answer has left: the count out of flight, the log line, the duration sample, which ends at
// the answer's stamp (Elysia runs onAfterResponse on a later turn of the event loop).
import { Elysia } from "elysia";
import type { Span } from "@opentelemetry/api";
import type { HttpServerMetrics } from "../../platform/http-metrics.ts";
import { routeOf, type RequestContextPlugin } from "./context.ts";
import { countOut } from "./in-flight.ts";
import { endSpan } from "../../platform/trace-context.ts";

const MS_PER_S = 1000;

export function observability(context: RequestContextPlugin, httpMetrics: HttpServerMetrics | undefined) {
  return new Elysia({ name: "observability" })
    .use(context)
    .onAfterHandle({ as: "global" }, ({ responseValue, trail }) => {
      if (responseValue instanceof Response) trail.answer(responseValue);
    })
    // `set` is not read: a hook that reads it makes Elysia map every answer through it.
    .onAfterResponse({ as: "global" }, ({ request, route, trail, deps }) => {
      countOut(deps, trail);
      const durationMs = (trail.answeredAt ?? performance.now()) - trail.started;
      const status = trail.status ?? 200;
      const name = routeOf(route);
      httpMetrics?.record(request.method, name, status, durationMs / MS_PER_S);
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

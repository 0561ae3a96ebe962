// The API's entry, around the Elysia app (app.ts), for every request: its state (the
// dependencies, the tenant, the log fields), the answer's duration on the histogram, and the
// request's log line. The long-lived server (start.ts: one pool for every request) and the edge
// worker (worker.ts: a client of its own per request) both build it here.
import type { Logger } from "../../shared/log.ts";
import { pathOf, routableRequest } from "../../shared/runtime.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../../shared/http-metrics.ts";
import { prepareSchemas } from "../schemas.ts";
import { buildApp, DOCUMENT_PATH, PAGE_PATH, type DocsAssets } from "../app.ts";
import { trackRequest, type LogFields, type RequestDeps, type RequestState, type Route } from "./context.ts";

export interface HandlerOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  /**
   * Generate every schema check and Elysia's handlers now, not on first use: workerd allows
   * code generation only while the module loads, so the worker builds its handler at module scope.
   */
  readonly aheadOfTime?: boolean;
  /** http_server_request_duration_seconds; none when unset (API_HTTP_METRICS=0, or no exporter). */
  readonly httpMetrics?: HttpServerMetrics;
  /** The interactive reference at /docs, from installed assets; none when unset (the worker). */
  readonly docs?: DocsAssets;
}

const MS_PER_S = 1000;

export type ApiHandler = (request: Request) => Promise<Response>;

// The route field of a request no route matched: one value, so a log or a label never holds a path.
export { UNMATCHED_ROUTE };

/** `current()` is called while a request is served, and must name that request's dependencies. */
export function createApiHandler(routes: readonly Route[], schemas: Parameters<typeof prepareSchemas>[0], current: () => RequestDeps, options: HandlerOptions = {}): ApiHandler {
  prepareSchemas(schemas);
  const app = buildApp(routes, { metrics: options.metrics, docs: options.docs, aheadOfTime: options.aheadOfTime ?? false });
  return async (original) => {
    const started = performance.now();
    const request = routableRequest(original);
    const state: RequestState = { deps: current(), fields: {}, tenant: "", route: UNMATCHED_ROUTE };
    trackRequest(request, state);
    let response = await app.handle(request);
    // The plugin's routes are not in the table: named by their path, a fixed one.
    if (state.route === UNMATCHED_ROUTE && response.status !== 404) state.route = pluginRouteOf(request.url) ?? UNMATCHED_ROUTE;
    // HEAD is GET without the body (RFC 9110 §9.3.2): Elysia answers a GET route's so; a
    // problem answered to a HEAD (a 401, a 404) goes without its body too.
    if (request.method === "HEAD" && response.body !== null) response = new Response(null, { status: response.status, headers: response.headers });
    const durationMs = performance.now() - started;
    // HEAD keeps its own method: the label says what the client sent, the route what answered.
    options.httpMetrics?.record(request.method, state.route, response.status, durationMs / MS_PER_S);
    try {
      logRequest(state.deps.log, request, state.route, response, durationMs, state.fields);
    } catch (error) {
      state.deps.log.error("request log failed", { error: String(error) });
    }
    return response;
  };
}

function pluginRouteOf(url: string): string | undefined {
  const path = pathOf(url);
  return path === DOCUMENT_PATH || path === PAGE_PATH ? path : undefined;
}

function logRequest(log: Logger, request: Request, route: string, response: Response, durationMs: number, extra: LogFields): void {
  const fields = {
    method: request.method,
    route,
    status: response.status,
    durationMs: Math.round(durationMs * 100) / 100,
    ...extra,
  };
  if (response.status >= 500) log.error("request", fields);
  else log.info("request", fields);
}

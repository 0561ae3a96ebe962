// The API's one request pipeline, for every route: the token (for everything under
// /charges, before the body, the key or the id is read), the route, its handler, the answer
// to a failure, then the request's log line. The long-lived server (start.ts: one pool for
// every request) and the edge worker (worker.ts: a client of its own per request) both build
// it here; each request finds its dependencies through `current`.
import { describeDbError, isTimeBound, isUnavailable } from "../../shared/db.ts";
import type { Logger } from "../../shared/log.ts";
import { pathOf } from "../../shared/runtime.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../../shared/http-metrics.ts";
import { authFailureDetail, type AuthResult } from "../auth.ts";
import { problemResponse } from "../problem.ts";
import { prepareSchemas } from "../schemas.ts";
import { RETRY_AFTER_S } from "./operation-route.ts";
import { createRouter, needsToken, type LogFields, type RequestContext, type RequestDeps, type Route } from "./router.ts";

export interface HandlerOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  /**
   * Generate every schema check now, not on first use: workerd allows code generation only
   * while the module loads, so the worker builds its handler at module scope.
   */
  readonly aheadOfTime?: boolean;
  /** http_server_request_duration_seconds; none when unset (API_HTTP_METRICS=0, or no exporter). */
  readonly httpMetrics?: HttpServerMetrics;
}

const MS_PER_S = 1000;

export type ApiHandler = (request: Request) => Promise<Response>;

// The route field of a request no route matched: one value, so a log or a label never holds a path.
export { UNMATCHED_ROUTE };

/** `current()` is called while a request is served, and must name that request's dependencies. */
export function createApiHandler(routes: readonly Route[], schemas: Parameters<typeof prepareSchemas>[0], current: () => RequestDeps, options: HandlerOptions = {}): ApiHandler {
  if (options.aheadOfTime) prepareSchemas(schemas);
  const match = createRouter(routes);
  return async (request) => {
    const started = performance.now();
    const deps = current();
    const fields: LogFields = {};
    const path = pathOf(request.url);
    // HEAD is GET without the body (RFC 9110 §9.3.2): health checkers send it.
    const head = request.method === "HEAD";
    const found = match(head ? "GET" : request.method, path);
    let response: Response;
    try {
      response = await serveOne(deps, request, path, found, fields, options);
    } catch (error) {
      response = failure(fields, error);
    }
    if (head) response = new Response(null, { status: response.status, headers: response.headers });
    const route = found?.route.path ?? UNMATCHED_ROUTE;
    const durationMs = performance.now() - started;
    // HEAD keeps its own method: the label says what the client sent, the route what answered.
    options.httpMetrics?.record(request.method, route, response.status, durationMs / MS_PER_S);
    try {
      logRequest(deps.log, request, route, response, durationMs, fields);
    } catch (error) {
      deps.log.error("request log failed", { error: String(error) });
    }
    return response;
  };
}

async function serveOne(deps: RequestDeps, request: Request, path: string, found: ReturnType<ReturnType<typeof createRouter>>, fields: LogFields, options: HandlerOptions): Promise<Response> {
  let tenant = "";
  if (needsToken(path)) {
    const result = await deps.auth.authenticate(request.headers.get("authorization"));
    if (result.kind !== "authenticated") {
      deps.counters.countAuthFailure(result.reason);
      fields.authFailure = result.reason;
      return authProblem(result);
    }
    tenant = result.tenant;
    fields.tenant = tenant;
  }
  if (found === undefined) return problemResponse("notFound", "no such route");
  const ctx: RequestContext = { request, route: found.route, params: found.params, tenant, deps, fields, metrics: options.metrics };
  return await found.route.handle(ctx);
}

// RFC 6750 §3: a request without credentials gets the bare challenge; one whose token was
// refused also learns that the token is the problem.
function authProblem(result: Exclude<AuthResult, { kind: "authenticated" }>): Response {
  if (result.kind === "unavailable") {
    return problemResponse("unavailable", authFailureDetail(result.reason), {}, { "retry-after": RETRY_AFTER_S });
  }
  const challenge = result.tokenSent ? 'Bearer error="invalid_token"' : "Bearer";
  return problemResponse("unauthorized", authFailureDetail(result.reason), {}, { "www-authenticate": challenge });
}

/**
 * A failure past the checks (the database away, a time bound, a bug): its cause goes on the
 * request's log line (an SQLSTATE and the database's words, never SQL text), and the answer
 * is a 503 (nothing was written either way: rolled back or never sent) or a 500.
 */
function failure(fields: LogFields, error: unknown): Response {
  fields.error = describeDbError(error);
  if (isUnavailable(error)) {
    const detail = isTimeBound(error)
      ? "the database did not answer within this request's time bounds; retry later"
      : "the database is unavailable; retry later";
    return problemResponse("unavailable", detail, {}, { "retry-after": RETRY_AFTER_S });
  }
  return problemResponse("internal", "an unexpected error occurred");
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

// The API's entry: the Elysia app (app.ts) built once, every request handed to it through
// routableRequest. The long-lived server (start.ts: one pool for every request) and the edge
// worker (worker.ts: a client of its own per request) both build it here.
import { routableRequest } from "../../platform/runtime.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../../platform/http-metrics.ts";
import { prepareSchemas, registerHeaderFormats } from "../schemas.ts";
import { buildApp, type DocsAssets } from "../app.ts";
import type { RequestDeps } from "./context.ts";
import type { TSchema } from "@sinclair/typebox";

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
  /** What the app serves (app.ts AppOptions.surface); "all" by default. */
  readonly surface?: "all" | "api" | "operator";
}

export type ApiHandler = (request: Request) => Promise<Response>;

/** A route the app serves, as /openapi.json names it. */
export interface ServedRoute {
  readonly method: string;
  readonly path: string;
  readonly operationId: string;
  /**
   * The schema of each answer it declares, by status. Its handlers answer stored bytes, which
   * Elysia does not check against them: test/api-schema.test.ts checks the answers instead.
   */
  readonly responses: Readonly<Record<string, TSchema>>;
}

export interface Api {
  readonly handle: ApiHandler;
  /** Every documented route (the docs' assets are served but not documented). */
  readonly routes: readonly ServedRoute[];
}

// The route field of a request no route matched: one value, so a log or a label never holds a path.
export { UNMATCHED_ROUTE };

/** `deps` are read while a request is served: the worker's resolve to that request's own. */
export function createApi(schemas: readonly TSchema[], deps: RequestDeps, options: HandlerOptions = {}): Api {
  prepareSchemas(schemas);
  registerHeaderFormats();
  const app = buildApp(deps, { metrics: options.metrics, httpMetrics: options.httpMetrics, docs: options.docs, aheadOfTime: options.aheadOfTime ?? false, surface: options.surface ?? "all" });
  const routes = app.routes.flatMap((r) => {
    const operationId = r.hooks?.detail?.operationId;
    const responses = (r.hooks?.response ?? {}) as Record<string, TSchema>;
    return typeof operationId === "string" ? [{ method: r.method, path: r.path, operationId, responses }] : [];
  });
  return { handle: (request) => app.handle(routableRequest(request)), routes };
}

/** The handler alone (start.ts, worker.ts). */
export function createApiHandler(schemas: readonly TSchema[], deps: RequestDeps, options: HandlerOptions = {}): ApiHandler {
  return createApi(schemas, deps, options).handle;
}

// The API as one Elysia app: the routes as plugins (routes.ts), the /charges group behind the
// bearer-token plugin (http/authentication.ts), each request's dependencies and trail in Elysia's
// context (http/context.ts), and every failure answered here as an RFC 9457 problem. The document
// comes from an app of every route that is never served (documentApp), so the operator's port
// (OPERATOR_PORT) still documents the /charges routes.
import { Elysia, ParseError, ValidationError, type AnyElysia } from "elysia";
import { CloudflareAdapter } from "elysia/adapter/cloudflare-worker";
import { describeDbError, isTimeBound, isUnavailable } from "../platform/db.ts";
import type { HttpServerMetrics } from "../platform/http-metrics.ts";
import { pathOf } from "../platform/runtime.ts";
import { RETRY_AFTER_S } from "./http/answers.ts";
import { authenticate } from "./http/authentication.ts";
import { bodyProblem, validationProblem } from "./http/checks.ts";
import { needsToken, requestContext, type RequestDeps, type RequestTrail } from "./http/context.ts";
import { observability } from "./http/observe.ts";
import { problemResponse } from "./problem.ts";
import { chargeRoutes, operatorRoutes } from "./routes.ts";
import { documentation, DOCUMENT_PATH, PAGE_PATH, type DocsAssets } from "./documentation.ts";
import { assetAnswer, DOCUMENT_CACHE_CONTROL } from "./asset-answer.ts";

export type { DocsAssets } from "./documentation.ts";

export interface AppOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  /** http_server_request_duration_seconds; none when unset (API_HTTP_METRICS=0, or no exporter). */
  readonly httpMetrics?: HttpServerMetrics;
  /** The interactive reference at /docs, from installed assets; none when unset (the worker). */
  readonly docs?: DocsAssets;
  /** Compose every check and handler now: workerd allows code generation only while the module loads. */
  readonly aheadOfTime?: boolean;
  /**
   * "all" (the default) on one port; with OPERATOR_PORT, "api" (the /charges routes) on PORT and
   * "operator" (health, readiness, metrics, the document, /docs) on its own.
   */
  readonly surface?: "all" | "api" | "operator";
}

export function buildApp(deps: RequestDeps, options: AppOptions): AnyElysia {
  const context = requestContext(deps);
  const surface = options.surface ?? "all";
  const app = newApp(options)
    .use(context)
    .use(observability(context, options.httpMetrics))
    // The operator's port has no /charges: a path there is a plain 404, with or without a token.
    // Destructured, never passed whole: Elysia reads a hook's source, and a context handed to a
    // function makes every route parse cookies, query and headers and rebuild each answer.
    .onError(({ request, params, body, trail, code, error }) => answerError(deps, trail, { request, params, body }, code, error, surface !== "operator"));
  if (surface !== "api") app.use(documentRoutes(context, documentApp(context, options), options.docs));
  // The routes' order, which the document's paths follow.
  if (surface !== "operator") app.use(chargeRoutes(context));
  if (surface !== "api") app.use(operatorRoutes(context, options.metrics));
  return app.compile();
}

// normalize off: an unknown member is a 400, never silently dropped. Ahead of time (the edge
// worker), the Cloudflare adapter compiles every route in compile(), at module load.
function newApp(options: AppOptions) {
  return new Elysia({ aot: true, normalize: false, ...(options.aheadOfTime ? { adapter: CloudflareAdapter } : {}) });
}

/** Every route, whichever port serves it, with the document and /docs: only asked for those once. */
function documentApp(context: ReturnType<typeof requestContext>, options: AppOptions): AnyElysia {
  const app = newApp(options).use(context).use(documentation(options.docs));
  return app.use(chargeRoutes(context)).use(operatorRoutes(context, options.metrics)).compile();
}

/** /openapi.json and /docs as documentApp makes them, once, compressed and tagged; and the docs' assets; all paced. */
function documentRoutes(context: ReturnType<typeof requestContext>, source: AnyElysia, docs: DocsAssets | undefined) {
  const plugin = new Elysia({ name: "document-routes" }).use(context);
  const made = (path: string, contentType: string) => async () => {
    const res = await source.handle(new Request(`http://localhost${path}`));
    if (res.status !== 200) throw new Error(`bug: the document app answered ${path} with ${res.status}`);
    return { body: new Uint8Array(await res.arrayBuffer()), contentType };
  };
  const paced = (answer: (request: Request) => Promise<Response>) => async ({ request, deps }: { request: Request; deps: RequestDeps }) => {
    await deps.admission.paceOperator();
    return answer(request);
  };
  plugin.get(DOCUMENT_PATH, paced(assetAnswer(made(DOCUMENT_PATH, "application/json"), DOCUMENT_CACHE_CONTROL)), { detail: { hide: true } });
  if (docs) plugin.get(PAGE_PATH, paced(assetAnswer(made(PAGE_PATH, "text/html; charset=utf-8"), DOCUMENT_CACHE_CONTROL)), { detail: { hide: true } });
  for (const [path, serveFile] of Object.entries(docs?.files ?? {})) plugin.get(path, paced(serveFile), { detail: { hide: true } });
  return plugin;
}

/** What onError is given of the request Elysia refused. */
type RefusedContext = Parameters<typeof validationProblem>[0];

/** Every failure Elysia raises or a handler throws, as a problem (`code`: Elysia's error code); HEAD gets it without its body. */
async function answerError(deps: RequestDeps, trail: RequestTrail, ctx: RefusedContext, code: unknown, error: unknown, tokenFirst: boolean): Promise<Response> {
  // Never throws: a throw here would skip Elysia's onAfterResponse (the log line, the count in flight).
  const answer = trail.answer(await problemOf(deps, trail, ctx, code, error, tokenFirst).catch((bug: unknown) => failure(trail, bug)));
  // HEAD is GET without the body (RFC 9110 §9.3.2): a problem answered to one goes without it too.
  return ctx.request.method === "HEAD" ? new Response(null, { status: answer.status, headers: answer.headers }) : answer;
}

async function problemOf(deps: RequestDeps, trail: RequestTrail, ctx: RefusedContext, code: unknown, error: unknown, tokenFirst: boolean): Promise<Response> {
  if (code === "NOT_FOUND") {
    // Under /charges the token comes first, matched or not.
    const verdict = tokenFirst && needsToken(pathOf(ctx.request.url)) ? await authenticate(deps, trail, ctx.request) : "";
    return verdict instanceof Response ? verdict : problemResponse("notFound", "no such route");
  }
  // A body route's parser threw its refusal (415, 413, 400: http/checks.ts).
  if (code === "PARSE") return bodyProblem(error instanceof ParseError ? error.cause : error);
  // Its message is fixed words (withFixedErrors): answered with our own problem, never it.
  if (code === "VALIDATION" && error instanceof ValidationError) return validationProblem(ctx, trail, error);
  return failure(trail, error);
}

/**
 * A failure past the checks (the database away, a time bound, a bug): its cause goes on the log
 * line (an SQLSTATE and the database's words, never SQL text); a 503 (nothing was written) or a 500.
 */
function failure(trail: RequestTrail, error: unknown): Response {
  trail.fields.error = describeDbError(error);
  if (isUnavailable(error)) {
    const detail = isTimeBound(error)
      ? "the database did not answer within this request's time bounds; retry later"
      : "the database is unavailable; retry later";
    return problemResponse("unavailable", detail, {}, { "retry-after": RETRY_AFTER_S });
  }
  return problemResponse("internal", "an unexpected error occurred");
}

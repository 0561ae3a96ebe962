// The API as one Elysia app of the route plugins, every failure answered here as an RFC 9457 problem;
// the document comes from an unserved app of every route, so OPERATOR_PORT's documents /charges too.
import { Elysia, ParseError, ValidationError, type AnyElysia } from "elysia";
import { CloudflareAdapter } from "elysia/adapter/cloudflare-worker";
import { describeDbError, isTimeBound, isUnavailable } from "../platform/db.ts";
import type { HttpServerMetrics } from "../platform/http-metrics.ts";
import { pathOf } from "../platform/runtime.ts";
import { RETRY_AFTER_S } from "./http/answers.ts";
import { authenticate } from "./http/authentication.ts";
import { bodyProblem, validationProblem } from "./http/checks.ts";
import { observability, requestContext, type RequestContextPlugin, type RequestDeps, type RequestTrail } from "./http/context.ts";
import { problemResponse } from "./problem.ts";
import { chargeRoutes, operatorRoutes } from "./routes.ts";
import { documentation, DOCUMENT_PATH, PAGE_PATH, type DocsAssets } from "./documentation.ts";
import { assetAnswer, DOCUMENT_CACHE_CONTROL } from "./asset-answer.ts";

export interface AppOptions {
  readonly metrics?: () => Promise<Response>;
  readonly httpMetrics?: HttpServerMetrics;
  readonly docs?: DocsAssets;
  /** Compose every check and handler now: workerd allows code generation only while the module loads. */
  readonly aheadOfTime?: boolean;
  /** With OPERATOR_PORT: "api" (/charges) on PORT, "operator" on its own; else "all" (the default). */
  readonly surface?: "all" | "api" | "operator";
}

export function buildApp(deps: RequestDeps, options: AppOptions): AnyElysia {
  const context = requestContext(deps);
  const surface = options.surface ?? "all";
  const app = newApp(options)
    .use(context)
    .use(observability(context, options.httpMetrics))
    // Destructured, never passed whole: Elysia reads a hook's source, and a whole context makes
    // every route parse cookies, query and headers. On the operator's port /charges is a plain 404.
    .onError(({ request, params, body, trail, code, error }) => answerError(deps, trail, { request, params, body }, code, error, surface !== "operator"));
  if (surface !== "api") app.use(documentRoutes(context, documentApp(context, options), options.docs));
  if (surface !== "operator") app.use(chargeRoutes(context));
  if (surface !== "api") app.use(operatorRoutes(context, options.metrics));
  return app.compile();
}

// normalize off: an unknown member is a 400, never silently dropped. Ahead of time (the edge
// worker), the Cloudflare adapter compiles every route in compile(), at module load.
function newApp(options: AppOptions) {
  return new Elysia({ aot: true, normalize: false, ...(options.aheadOfTime ? { adapter: CloudflareAdapter } : {}) });
}

/** Every route, whichever port serves it, with the document and /docs: asked for those once. */
function documentApp(context: RequestContextPlugin, options: AppOptions): AnyElysia {
  const app = newApp(options).use(context).use(documentation(options.docs));
  return app.use(chargeRoutes(context)).use(operatorRoutes(context, options.metrics)).compile();
}

/** /openapi.json and /docs as documentApp makes them, and the docs' assets: each made once, all paced. */
function documentRoutes(context: RequestContextPlugin, source: AnyElysia, docs: DocsAssets | undefined) {
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

type RefusedContext = Parameters<typeof validationProblem>[0];

/** Every failure Elysia raises or a handler throws, as a problem (`code`: Elysia's error code). */
async function answerError(deps: RequestDeps, trail: RequestTrail, ctx: RefusedContext, code: unknown, error: unknown, tokenFirst: boolean): Promise<Response> {
  // Never throws: a throw here would skip Elysia's onAfterResponse (the log line, the count in flight).
  const answer = trail.answer(await problemOf(deps, trail, ctx, code, error, tokenFirst).catch((bug: unknown) => failure(trail, bug)));
  // HEAD is GET without the body (RFC 9110 §9.3.2): a problem answered to one goes without it too.
  return ctx.request.method === "HEAD" ? new Response(null, { status: answer.status, headers: answer.headers }) : answer;
}

async function problemOf(deps: RequestDeps, trail: RequestTrail, ctx: RefusedContext, code: unknown, error: unknown, tokenFirst: boolean): Promise<Response> {
  if (code === "NOT_FOUND") {
    // Under /charges the token comes first, matched or not.
    const underCharges = tokenFirst && /^\/charges(?:\/|$)/.test(pathOf(ctx.request.url));
    const verdict = underCharges ? await authenticate(deps, trail, ctx.request) : "";
    return verdict instanceof Response ? verdict : problemResponse("notFound", "no such route");
  }
  if (code === "PARSE") return bodyProblem(error instanceof ParseError ? error.cause : error);
  if (code === "VALIDATION" && error instanceof ValidationError) return validationProblem(ctx, trail, error);
  return failure(trail, error);
}

/** A failure past the checks, its cause on the log line (never SQL text): 503 (nothing written) or 500. */
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

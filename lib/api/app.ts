// The one place that knows Elysia: the route table (routes.ts) becomes an Elysia app. Elysia
// routes, reads the body with our parser, checks params, headers and body against the
// route's TypeBox schemas, and builds /openapi.json from the same schemas (@elysiajs/openapi);
// every failure it raises is answered here as an RFC 9457 problem, 400 for a schema (not
// Elysia's 422), never HTML or a stack trace. What stays ours says why where it lives: the
// strict JSON reader (body.ts: numbers judged on their text), the key parser (core/keys.ts:
// RFC 9651), the problems (problem.ts).
import { Elysia, ParseError, ValidationError, type AnyElysia, type Context } from "elysia";
import { CloudflareAdapter } from "elysia/adapter/cloudflare-worker";
import { openapi, withHeaders } from "@elysiajs/openapi";
import type { AdditionalReference } from "@elysiajs/openapi/types";
import { Type as t, type TSchema } from "@sinclair/typebox";
import { describeDbError, isTimeBound, isUnavailable } from "../shared/db.ts";
import { pathOf } from "../shared/runtime.ts";
import { authFailureDetail, type AuthResult } from "./auth.ts";
import { invalidBody, readJsonBody, schemaFaults } from "./body.ts";
import { checkOf } from "./schemas.ts";
import { MAX_FAULTS } from "./strict-json.ts";
import { bodyProblem, RETRY_AFTER_S, validationProblem, type SchemaFault } from "./http/answers.ts";
import { invalidIdProblem, needsToken, stateOf, type RequestState, type Route } from "./http/context.ts";
import { PROBLEM_BASE, problemResponse } from "./problem.ts";
import { COMPONENTS } from "./routes.ts";

/** The assets of the interactive reference at /docs, served by this process (no CDN). */
export interface DocsAssets {
  /** Path → the asset's answer; the page names `script` and `stylesheet` among them. */
  readonly files: Readonly<Record<string, () => Promise<Response>>>;
  readonly script: string;
  readonly stylesheet: string;
}

export interface AppOptions {
  readonly metrics?: () => Promise<Response>;
  readonly docs?: DocsAssets;
  /** Compose every handler now (workerd allows code generation only while the module loads). */
  readonly aheadOfTime: boolean;
}

const DOCUMENT_INFO = {
  title: "Charges",
  version: "0.3.0",
  description: `Idempotent charges and refunds with a transactional outbox. Problem types live under ${PROBLEM_BASE}.`,
};
const BEARER_SCHEME = {
  type: "http",
  scheme: "bearer",
  bearerFormat: "JWT",
  description: "HS256 with the API's AUTH_JWT_SECRET, or a key at AUTH_JWKS_URL; the tenant is the sub claim (or AUTH_TENANT_CLAIM)",
} as const;
// What a 201 of an idempotent operation carries besides its body.
const CREATED_HEADERS = { location: t.String(), "idempotent-replayed": t.Optional(t.Literal("true")) };

/**
 * Elysia's hooks before validation can end a request only by throwing: a refused token is
 * thrown as this, carrying its answer, and onError hands the answer back.
 */
class Answered extends Error {
  constructor(readonly response: Response) {
    super("answered before the handler");
  }
}

/** What @elysiajs/openapi serves beside the route table: the document, and the page with the docs assets. */
export const DOCUMENT_PATH = "/openapi.json";
export const PAGE_PATH = "/docs";

export function buildApp(routes: readonly Route[], options: AppOptions): AnyElysia {
  // normalize off: an unknown member is a 400, never silently dropped. Ahead of time (the
  // edge worker), the Cloudflare adapter compiles every route in compile(), at module load.
  const adapter = options.aheadOfTime ? { adapter: CloudflareAdapter } : {};
  let app: AnyElysia = new Elysia({ aot: true, normalize: false, ...adapter })
    .use(
      openapi({
        path: PAGE_PATH,
        specPath: DOCUMENT_PATH,
        openapiVersion: "3.1.0",
        provider: options.docs ? "swagger-ui" : null,
        // No validator badge: Swagger UI would send the document to its public validator.
        swagger: options.docs && { cdn: options.docs.script, theme: options.docs.stylesheet, autoDarkMode: false, displayOperationId: true, validatorUrl: "none" },
        documentation: { info: DOCUMENT_INFO, components: { schemas: COMPONENTS, securitySchemes: { bearer: BEARER_SCHEME } } },
        references: documentedHeaders(routes),
      }),
    )
    .onError((ctx) => answerError(ctx.request, ctx.code, ctx.error));
  for (const [path, serveFile] of Object.entries(options.docs?.files ?? {})) {
    app = app.get(path, ({ request }) => ((stateOf(request).route = path), serveFile()), { detail: { hide: true } });
  }
  for (const route of routes) app = declare(app, route, options);
  // Every handler composed now rather than on its first request.
  return app.compile();
}

function declare(app: AnyElysia, route: Route, options: AppOptions): AnyElysia {
  const schema = route.schema ?? {};
  // The token first, so nothing of a request without one is read: in the parse of a route with
  // a body (before Elysia reads it), in the transform of one without (before its params are checked).
  const body = schema.body;
  const entry = body
    ? {
        // Ours answers every body (a value, or a throw for 415, 413 or 400); the media type's
        // name after it is what the document shows.
        parse: [async ({ request, params }: { request: Request; params: Record<string, string> }) => (await enter(request, route, params), checkedBody(request, body)), "application/json"],
      }
    : { transform: ({ request, params }: { request: Request; params: Record<string, string> }) => enter(request, route, params) };
  const hook = { params: schema.params, body: schema.body, response: schema.response && responsesOf(schema.response), detail: route.detail, ...entry };
  const handler = (ctx: Context) => {
    const state = stateOf(ctx.request);
    return route.handle({ ...state, request: ctx.request, route, params: ctx.params as Record<string, string>, body: ctx.body, metrics: options.metrics });
  };
  return app.route(route.method, route.path, handler as never, hook as never);
}

/** The headers routes read themselves, for the document only (@elysiajs/openapi's references). */
function documentedHeaders(routes: readonly Route[]): AdditionalReference {
  const reference: Record<string, Record<string, { headers: TSchema }>> = {};
  for (const route of routes) {
    const headers = route.schema?.documentedHeaders;
    if (headers) reference[route.path] = { ...reference[route.path], [route.method.toLowerCase()]: { headers } };
  }
  return reference as unknown as AdditionalReference;
}

/** The 201's headers, documented beside its body. */
function responsesOf(response: Readonly<Record<number, TSchema>>): Record<number, TSchema> {
  return Object.fromEntries(Object.entries(response).map(([status, s]) => [status, status === "201" ? withHeaders(s, CREATED_HEADERS) : s]));
}

/** The request has reached `route`: named for logs and metrics, its token checked once, then its ids. */
async function enter(request: Request, route: Route, params: Record<string, string> | undefined): Promise<void> {
  const state = stateOf(request);
  if (state.route === route.path) return;
  state.route = route.path;
  if (needsToken(route.path)) await authenticate(state, request);
  // Checked before Elysia's own check, which would format the value it refuses.
  const names = params ? Object.keys(params) : [];
  const badId = params && names.length > 0 ? invalidIdProblem(params, names) : undefined;
  if (badId) throw new Answered(badId);
}

/**
 * The body read as strict JSON and checked against `schema` here, so Elysia's check after it
 * never fails: its ValidationError formats the whole value it refused (pretty-printed unless
 * NODE_ENV=production), work and memory that grow with the input. Ours names a few fields.
 */
async function checkedBody(request: Request, schema: TSchema): Promise<unknown> {
  const value = await readJsonBody(request);
  const check = checkOf(schema);
  if (check.Check(value)) return value;
  const { faults, more } = schemaFaults(check.Errors(value));
  throw invalidBody(faults, more);
}

async function authenticate(state: RequestState, request: Request): Promise<void> {
  const result = await state.deps.auth.authenticate(request.headers.get("authorization"));
  if (result.kind !== "authenticated") {
    state.deps.counters.countAuthFailure(result.reason);
    state.fields.authFailure = result.reason;
    throw new Answered(authProblem(result));
  }
  state.tenant = result.tenant;
  state.fields.tenant = result.tenant;
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

/** Every failure Elysia raises or a handler throws, as a problem (`code`: Elysia's error code). */
async function answerError(request: Request, code: unknown, error: unknown): Promise<Response> {
  // Thrown from our parser, it reaches here wrapped in Elysia's ParseError.
  const cause = error instanceof ParseError ? error.cause : error;
  if (cause instanceof Answered) return cause.response;
  const state = stateOf(request);
  switch (code) {
    case "NOT_FOUND":
      // Under /charges the token comes first, matched or not.
      if (needsToken(pathOf(request.url))) {
        try {
          await authenticate(state, request);
        } catch (refused) {
          if (refused instanceof Answered) return refused.response;
          throw refused;
        }
      }
      return problemResponse("notFound", "no such route");
    case "PARSE":
      return bodyProblem(cause);
    case "VALIDATION":
      return schemaProblem(error);
    default:
      return failure(state, error);
  }
}

/** A 400 for what failed its schema: an id, or the body's fields. */
function schemaProblem(error: unknown): Response {
  if (!(error instanceof ValidationError)) throw new Error("bug: a VALIDATION error that is not Elysia's ValidationError");
  const faults: readonly SchemaFault[] = error.all;
  const type = error.type;
  if (type === "params") {
    const names = faults.map((f) => f.path.replace(/^\//, ""));
    return invalidIdProblem(Object.fromEntries(names.map((n) => [n, ""])), names) ?? problemResponse("invalidId", "an id must be a UUID");
  }
  return validationProblem(faults.slice(0, MAX_FAULTS), Math.max(0, faults.length - MAX_FAULTS));
}

/**
 * A failure past the checks (the database away, a time bound, a bug): its cause goes on the
 * request's log line (an SQLSTATE and the database's words, never SQL text), and the answer
 * is a 503 (nothing was written either way: rolled back or never sent) or a 500.
 */
function failure(state: RequestState, error: unknown): Response {
  state.fields.error = describeDbError(error);
  if (isUnavailable(error)) {
    const detail = isTimeBound(error)
      ? "the database did not answer within this request's time bounds; retry later"
      : "the database is unavailable; retry later";
    return problemResponse("unavailable", detail, {}, { "retry-after": RETRY_AFTER_S });
  }
  return problemResponse("internal", "an unexpected error occurred");
}

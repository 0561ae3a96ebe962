// The HTTP API as an Elysia app exposed as a plain fetch handler, so the entrypoint stays
// thin and the same app runs on Bun and Deno.
import { Elysia, ValidationError } from "elysia";
import { CloudflareAdapter } from "elysia/adapter/cloudflare-worker";
import { isTimeBound, isUnavailable } from "../shared/db.ts";
import { pathOf } from "../shared/runtime.ts";
import type { ChargeOutcome, ChargeService } from "./charges.ts";
import { parseIdempotencyKey } from "./keys.ts";
import { isUuid } from "../shared/uuid.ts";
import { ProblemError, problemResponse } from "./problem.ts";
import { readJsonBody } from "./body.ts";
import { ChargeParams, chargeBodyValidator } from "./schemas.ts";
import { openApiDocument } from "./openapi.ts";
import { authFailureDetail, type AuthResult, type Authenticator } from "./auth.ts";

export interface AppDeps {
  /** Whether the database answers, for GET /readyz; bounded in time by the caller. */
  readonly ready: () => Promise<boolean>;
  readonly charges: ChargeService;
  /** Verifies the bearer token of every /charges request and names its tenant. */
  readonly auth: Authenticator;
  /** Hears the verdict on every /charges request (metrics, logs); never the token. */
  readonly onAuth?: (request: Request, result: AuthResult) => void;
  /** Prometheus exposition for GET /metrics, wired by the entrypoint. */
  readonly metrics?: () => Promise<Response>;
  /** Hears the outcome of every POST /charges that reached the service (metrics, logs). */
  readonly onOutcome?: (request: Request, outcome: ChargeOutcome["kind"], key: string) => void;
  /** Hears what made a request fail with a 5xx (the database away, a time bound, a bug), for its log line. */
  readonly onFailure?: (request: Request, error: unknown) => void;
  /**
   * Compile every route when the app is built, not on its first request: edge runtimes
   * (workerd) allow code generation only while a module loads.
   */
  readonly aheadOfTime?: boolean;
}

// How long a client should wait before retrying a 409 (the first request is a single
// statement, normally done in milliseconds) or a 503 (the pool reconnects within a second).
const RETRY_AFTER_S = "1";

function toResponse(outcome: ChargeOutcome): Response {
  switch (outcome.kind) {
    case "created":
      return chargeResponse(outcome.status, outcome.body, outcome.chargeId, {});
    case "replayed":
      return chargeResponse(outcome.status, outcome.body, outcome.chargeId, { "idempotent-replayed": "true" });
    case "payload_conflict":
      return problemResponse("payloadConflict", "this Idempotency-Key was already used with a different request body");
    case "in_flight":
      return problemResponse(
        "inFlight",
        "a request with this Idempotency-Key is still being processed; retry later",
        {},
        { "retry-after": RETRY_AFTER_S },
      );
    default: {
      const unreachable: never = outcome;
      throw new Error(`bug: unhandled outcome ${JSON.stringify(unreachable)}`);
    }
  }
}

function chargeResponse(status: number, body: string, chargeId: string, extra: Record<string, string>): Response {
  return new Response(body, {
    status,
    headers: { "content-type": "application/json", location: `/charges/${chargeId}`, ...extra },
  });
}

function errorResponse(error: unknown): Response {
  if (error instanceof ProblemError) return problemResponse(error.problem, error.detail, error.extensions);
  if (error instanceof ValidationError) return validationProblem(error);
  if (isUnavailable(error)) {
    // Nothing was written either way: the statement was rolled back or never sent.
    const detail = isTimeBound(error)
      ? "the database did not answer within this request's time bounds; retry later"
      : "the database is unavailable; retry later";
    return problemResponse("unavailable", detail, {}, { "retry-after": RETRY_AFTER_S });
  }
  return problemResponse("internal", "an unexpected error occurred");
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

/** The routes behind a bearer token; the operator endpoints stay open. */
function needsToken(url: string): boolean {
  const path = pathOf(url);
  return path === "/charges" || path.startsWith("/charges/");
}

function validationProblem(error: ValidationError): Response {
  const errors = error.all.map((e) => {
    const path = "path" in e && typeof e.path === "string" ? e.path : "";
    const field = path.replace(/^\//, "").replace(/\//g, ".") || "(body)";
    const message = "summary" in e && typeof e.summary === "string" ? e.summary : e.message;
    return { field, message };
  });
  const detail = errors.map((e) => `${e.field}: ${e.message}`).join("; ") || "the body does not match the schema";
  return problemResponse("invalidBody", detail, { errors });
}

/** The API's routes as one fetch handler. */
export interface ApiApp {
  handle(request: Request): Promise<Response>;
}

export function buildApp(deps: AppDeps): ApiApp {
  const routes = buildRoutes(deps);
  const createCharge = chargeCreation(deps);
  // POST /charges, nearly every request, is served by a plain function rather than through
  // Elysia's lifecycle (context object, request hook, parse hook, validator wrapper, response
  // mapping), which cost more per charge than the route's own work; every other route,
  // and every other path under /charges, goes through Elysia.
  return { handle: (request) => (isChargeCreation(request) ? createCharge(request) : routes.handle(request)) };
}

function buildRoutes(deps: AppDeps) {
  // Set by the request hook for every /charges request that got past it.
  const tenants = new WeakMap<Request, string>();
  const tenantOf = (request: Request): string => {
    const tenant = tenants.get(request);
    if (tenant === undefined) throw new Error("bug: a /charges route ran without an authenticated tenant");
    return tenant;
  };
  // normalize: false, so an unknown field is a 400, not silently dropped.
  const app = new Elysia({ normalize: false, ...(deps.aheadOfTime && { adapter: CloudflareAdapter }) })
    // Before routing and before the body is read: an unauthenticated request learns nothing
    // about the body, the key or the charge it names, and nothing is written.
    .onRequest(async ({ request }) => {
      if (!needsToken(request.url)) return;
      const tenant = tenantOrProblem(deps, request, await deps.auth.authenticate(request.headers.get("authorization")));
      if (typeof tenant !== "string") return tenant;
      tenants.set(request, tenant);
    })
    .onError(({ error, code, request }) => {
      if (code === "NOT_FOUND") return problemResponse("notFound", "no such route");
      // Elysia wraps whatever the body parser threw; ours are ProblemErrors (415, 413, 400).
      if (code === "PARSE") return bodyProblem(error.cause);
      return failure(deps, request, error);
    })
    .get("/charges/:id", ({ params, request }) => chargeLookup(deps, tenantOf(request), params.id), { params: ChargeParams })
    .get("/healthz", () => Response.json({ status: "ok" }))
    .get("/readyz", async () => {
      return (await deps.ready())
        ? Response.json({ status: "ready" })
        : problemResponse("unavailable", "the database does not answer", {}, { "retry-after": RETRY_AFTER_S });
    })
    .get("/openapi.json", () => Response.json(openApiDocument()))
    .get("/metrics", () => (deps.metrics ? deps.metrics() : problemResponse("notFound", "metrics are not enabled")));
  return deps.aheadOfTime ? app.compile() : app;
}

/** GET /charges/:id, within the tenant's own charges. */
async function chargeLookup(deps: AppDeps, tenant: string, id: string): Promise<Response> {
  if (!isUuid(id)) return problemResponse("invalidId", "the charge id must be a UUID");
  const found = await deps.charges.get(tenant, id);
  switch (found.kind) {
    case "found":
      return new Response(found.body, { headers: { "content-type": "application/json;charset=utf-8" } });
    case "not_found":
      return problemResponse("notFound", `no charge with id ${id.toLowerCase()}`);
    default: {
      const unreachable: never = found;
      throw new Error(`bug: unhandled lookup ${JSON.stringify(unreachable)}`);
    }
  }
}

// Where Elysia (1.4.30) looks for the path: the first "/" from this index (runtime.ts
// routableRequest guarantees one there), up to the query.
const ELYSIA_PATH_INDEX = 11;

/** Exactly the requests Elysia's router would hand to a POST /charges route (with or without the trailing slash). */
function isChargeCreation(request: Request): boolean {
  if (request.method !== "POST") return false;
  const url = request.url;
  const start = url.indexOf("/", ELYSIA_PATH_INDEX);
  const query = url.indexOf("?", start + 1);
  const path = url.substring(start, query === -1 ? undefined : query);
  return path === "/charges" || path === "/charges/";
}

/**
 * POST /charges, in the order the Elysia routes keep for the others: the token (before the
 * body or the key is read), the body (415, 413, 400), the schema (400), the key (400), then
 * the charge. Errors are answered as Elysia's onError above answers them.
 */
function chargeCreation(deps: AppDeps): (request: Request) => Promise<Response> {
  return async (request) => {
    let tenant: string | Response;
    try {
      tenant = tenantOrProblem(deps, request, await deps.auth.authenticate(request.headers.get("authorization")));
    } catch (error) {
      return failure(deps, request, error);
    }
    if (typeof tenant !== "string") return tenant;
    let body: unknown;
    try {
      body = await readJsonBody(request);
    } catch (error) {
      return bodyProblem(error);
    }
    const validator = chargeBodyValidator();
    if (!validator.Check(body)) return validationProblem(new ValidationError("body", validator, body));
    // In this function rather than a helper of its own: each async frame costs a promise and a
    // microtask on every charge.
    try {
      const parsed = parseIdempotencyKey(request.headers.get("idempotency-key"));
      if (!parsed.ok) return problemResponse("invalidKey", parsed.reason);
      const outcome = await deps.charges.create({ tenant, key: parsed.key, amountCents: body.amountCents, traceparent: traceparentOf(request) });
      deps.onOutcome?.(request, outcome.kind, parsed.key);
      return toResponse(outcome);
    } catch (error) {
      return failure(deps, request, error);
    }
  };
}

/** The request's tenant, or the 401 problem to answer; onAuth hears the verdict either way. */
function tenantOrProblem(deps: AppDeps, request: Request, result: AuthResult): string | Response {
  deps.onAuth?.(request, result);
  return result.kind === "authenticated" ? result.tenant : authProblem(result);
}

/** What reading the body threw: our 415, 413 or 400, or anything else as "not valid JSON". */
function bodyProblem(cause: unknown): Response {
  return errorResponse(cause instanceof ProblemError ? cause : new ProblemError("invalidBody", "the body is not valid JSON"));
}

/** A failure past the checks (the database away, a time bound, a bug): heard by onFailure, answered 503 or 500. */
function failure(deps: AppDeps, request: Request, error: unknown): Response {
  if (!(error instanceof ProblemError) && !(error instanceof ValidationError)) deps.onFailure?.(request, error);
  return errorResponse(error);
}

// W3C Trace Context version 00: only a well-formed traceparent is carried into the outbox;
// anything else is dropped rather than stored and forwarded to subscribers.
const TRACEPARENT_RE = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

function traceparentOf(request: Request): string | null {
  const value = request.headers.get("traceparent")?.trim().toLowerCase();
  return value && TRACEPARENT_RE.test(value) && !/^00-0{32}-|-0{16}-/.test(value) ? value : null;
}

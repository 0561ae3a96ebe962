// The API's fetch handler, built from what one request needs. The long-lived server
// (start.ts: one pool for every request) and the edge worker (worker.ts: a client of its own
// per request) both build it here, so they serve the same routes, authentication, logs and
// metrics. The Elysia app is built once; each request finds its dependencies through
// `current`, which the server answers with one fixed set and the worker with the request's own.
import type { ChargeOutcome, ChargeService } from "./charges.ts";
import { CHARGES_ENDPOINT } from "./charges.ts";
import { buildApp, type ApiApp, type AppDeps } from "./app.ts";
import type { ApiMetrics } from "./metrics.ts";
import type { Logger } from "../shared/log.ts";
import { describeDbError, probeDatabase, type Sql } from "../shared/db.ts";
import { keyHash } from "../shared/redact.ts";
import { pathOf } from "../shared/runtime.ts";
import { problemResponse } from "./problem.ts";
import type { Authenticator } from "./auth.ts";
import { prepareSchemas } from "./schemas.ts";

// /readyz answers "not ready" rather than hang when the database does not answer.
const READY_TIMEOUT_MS = 2000;

/** What serving one request takes. */
export interface RequestDeps {
  readonly sql: Sql;
  readonly charges: ChargeService;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly counters: ApiMetrics;
}

export interface HandlerOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  /**
   * Generate every route's code and every schema check now, not on first use: workerd allows
   * code generation only while the module loads, so the worker builds its handler at module scope.
   */
  readonly aheadOfTime?: boolean;
}

export type ApiHandler = (request: Request) => Promise<Response>;

/** `current()` is called while a request is served, and must name that request's dependencies. */
export function createApiHandler(current: () => RequestDeps, options: HandlerOptions = {}): ApiHandler {
  if (options.aheadOfTime) prepareSchemas();
  const outcomes = new WeakMap<Request, LogFields>();
  const app = buildApp({
    ready: async () => (await probeDatabase(current().sql, READY_TIMEOUT_MS)).up,
    charges: {
      create: (request) => current().charges.create(request),
      get: (tenant, id) => current().charges.get(tenant, id),
    },
    auth: {
      get mode() {
        return current().auth.mode;
      },
      authenticate: (authorization) => current().auth.authenticate(authorization),
    },
    metrics: options.metrics,
    aheadOfTime: options.aheadOfTime,
    ...requestHooks(current, outcomes),
  });
  return loggedHandler(app, current, outcomes);
}

/** What the routes tell about each request: its log line's fields, and the metrics. */
function requestHooks(current: () => RequestDeps, outcomes: WeakMap<Request, LogFields>): Pick<AppDeps, "onAuth" | "onFailure" | "onOutcome"> {
  return {
    onAuth(request, result) {
      if (result.kind === "authenticated") {
        outcomes.set(request, { tenant: result.tenant });
        return;
      }
      current().counters.countAuthFailure(result.reason);
      outcomes.set(request, { authFailure: result.reason });
    },
    onFailure(request, error) {
      // The request line carries the cause: an SQLSTATE and the database's words, never SQL text.
      fieldsOf(outcomes, request).error = describeDbError(error);
    },
    // Runs after the charge committed: a failure here is logged, never turned into a 500.
    onOutcome(request, outcome, key) {
      try {
        current().counters.countOutcome(CHARGES_ENDPOINT, outcome);
        const fields = fieldsOf(outcomes, request);
        fields.outcome = outcome;
        fields.keyHash = keyHash(key);
      } catch (error) {
        current().log.error("outcome bookkeeping failed", { error: String(error) });
      }
    },
  };
}

/**
 * The app's answer, then its log line. Whatever happens after the route answered (the log
 * line) cannot change the answer: a committed charge always goes out as its 201.
 */
function loggedHandler(app: ApiApp, current: () => RequestDeps, outcomes: WeakMap<Request, LogFields>): ApiHandler {
  return async (request) => {
    const started = performance.now();
    const { log } = current();
    let response: Response;
    try {
      response = await app.handle(request);
    } catch (error) {
      log.error("unhandled error", { error: String(error) });
      response = problemResponse("internal", "an unexpected error occurred");
    }
    try {
      logRequest(log, request, response, performance.now() - started, outcomes.get(request));
    } catch (error) {
      log.error("request log failed", { error: String(error) });
    }
    return response;
  };
}

/**
 * What a request's log line adds: never the token or the raw key. Filled in place as the
 * request goes (its fields, and so the line's, in the order they were learnt).
 */
interface LogFields {
  tenant?: string;
  authFailure?: string;
  outcome?: ChargeOutcome["kind"];
  keyHash?: string;
  /** What made a 5xx: the database away, a time bound tripped, or a bug. */
  error?: string;
}

function fieldsOf(outcomes: WeakMap<Request, LogFields>, request: Request): LogFields {
  let fields = outcomes.get(request);
  if (fields === undefined) outcomes.set(request, (fields = {}));
  return fields;
}

function logRequest(log: Logger, request: Request, response: Response, durationMs: number, extra: LogFields | undefined): void {
  const path = pathOf(request.url);
  const fields = {
    method: request.method,
    route: routeOf(path),
    status: response.status,
    durationMs: Math.round(durationMs * 100) / 100,
    ...extra,
  };
  if (response.status >= 500) log.error("request", fields);
  else log.info("request", fields);
}

const ROUTES = new Set(["/charges", "/healthz", "/readyz", "/metrics", "/openapi.json"]);
const CHARGE_PATH_RE = /^\/charges\/[^/]+$/;

// The route template, so a log line never mixes ids into the route field.
function routeOf(path: string): string {
  if (CHARGE_PATH_RE.test(path)) return "/charges/:id";
  return ROUTES.has(path) ? path : "(unmatched)";
}

// The route table's shape and its matching: a method and a template ("/charges/:id") per
// route, the template also being what logs, metrics and the key's scope call the route.
import type { Logger } from "../../shared/log.ts";
import type { Sql } from "../../shared/db.ts";
import type { IdempotencyCore } from "../core/service.ts";
import type { Authenticator } from "../auth.ts";
import type { ApiMetrics } from "../metrics.ts";
import type { OutcomeKind } from "../core/service.ts";
import { isUuid } from "../../shared/uuid.ts";
import { problemResponse } from "../problem.ts";

/** What serving one request takes: one fixed set in the server, the request's own in the worker. */
export interface RequestDeps {
  readonly sql: Sql;
  readonly core: IdempotencyCore;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly counters: ApiMetrics;
}

/**
 * What a request's log line adds: never the token or the raw key. Filled in place as the
 * request goes (its fields, and so the line's, in the order they were learnt).
 */
export interface LogFields {
  tenant?: string;
  authFailure?: string;
  outcome?: OutcomeKind;
  keyHash?: string;
  /** What made a 5xx: the database away, a time bound tripped, or a bug. */
  error?: string;
}

export interface RequestContext {
  readonly request: Request;
  readonly route: Route;
  readonly params: Readonly<Record<string, string>>;
  /** The authenticated tenant of a route behind a token; "" on the operator routes. */
  readonly tenant: string;
  readonly deps: RequestDeps;
  readonly fields: LogFields;
  /** Prometheus exposition for GET /metrics, when the entrypoint wired one. */
  readonly metrics: (() => Promise<Response>) | undefined;
}

export interface Route {
  readonly method: "GET" | "POST";
  /** The template: literal segments and `:name` parameters. */
  readonly path: string;
  readonly handle: (ctx: RequestContext) => Promise<Response> | Response;
  /** The OpenAPI operation object of this method and path. */
  readonly openapi: Record<string, unknown>;
}

// What each path parameter names, for the problem of an id that is not a UUID.
const PARAM_NOUNS: Readonly<Record<string, string>> = { id: "charge", refundId: "refund" };

/** What path parameter `name` names ("charge", "refund"). */
export function nounOf(name: string): string {
  return PARAM_NOUNS[name] ?? name;
}

/** The 400 invalid-id problem for the first of `names` whose parameter is not a UUID, if any. */
export function invalidIdProblem(params: Readonly<Record<string, string>>, names: readonly string[]): Response | undefined {
  const bad = names.find((name) => !isUuid(params[name] ?? ""));
  return bad === undefined ? undefined : problemResponse("invalidId", `the ${nounOf(bad)} id must be a UUID`);
}

/** The routes behind a bearer token: everything under /charges, matched or not. */
export function needsToken(path: string): boolean {
  return path === "/charges" || path.startsWith("/charges/");
}

export interface Match {
  readonly route: Route;
  readonly params: Readonly<Record<string, string>>;
}

interface Compiled {
  readonly route: Route;
  readonly segments: readonly string[];
}

const NO_PARAMS: Readonly<Record<string, string>> = Object.freeze({});

/** A matcher over `routes`: exact paths by one map lookup, templates segment by segment. */
export function createRouter(routes: readonly Route[]): (method: string, path: string) => Match | undefined {
  const exact = new Map<string, Route>();
  const templates: Compiled[] = [];
  for (const route of routes) {
    if (route.path.includes("/:")) templates.push({ route, segments: route.path.split("/") });
    else exact.set(`${route.method} ${route.path}`, route);
  }
  return (method, rawPath) => {
    // One trailing slash is the same route ("/charges/" is "/charges").
    const path = rawPath.length > 1 && rawPath.endsWith("/") ? rawPath.slice(0, -1) : rawPath;
    const route = exact.get(`${method} ${path}`);
    if (route !== undefined) return { route, params: NO_PARAMS };
    const segments = path.split("/");
    for (const t of templates) {
      if (t.route.method !== method) continue;
      const params = matchSegments(t.segments, segments);
      if (params !== undefined) return { route: t.route, params };
    }
    return undefined;
  };
}

function matchSegments(template: readonly string[], segments: readonly string[]): Record<string, string> | undefined {
  if (template.length !== segments.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < template.length; i++) {
    const want = template[i]!;
    const got = segments[i]!;
    if (want.startsWith(":")) {
      if (got === "") return undefined;
      params[want.slice(1)] = decodeSegment(got);
    } else if (want !== got) return undefined;
  }
  return params;
}

/** A parameter as the client meant it; a malformed escape is kept as sent (it then fails its own check). */
function decodeSegment(segment: string): string {
  if (!segment.includes("%")) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The OpenAPI path of a template: "/charges/:id" → "/charges/{id}". */
export function openApiPath(template: string): string {
  return template.replace(/:([A-Za-z]+)/g, "{$1}");
}

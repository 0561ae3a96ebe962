// The route table's shape, framework-free: a method and a template ("/charges/:id") per route,
// the template also being what logs, metrics and the key's scope call the route. app.ts hands
// the table to Elysia, which routes, parses and validates; a handler gets what it checked.
import type { Logger } from "../../shared/log.ts";
import type { Sql } from "../../shared/db.ts";
import type { IdempotencyCore } from "../core/service.ts";
import type { Authenticator } from "../auth.ts";
import type { ApiMetrics } from "../metrics.ts";
import type { OutcomeKind } from "../core/outcome.ts";
import type { TObject, TSchema } from "@sinclair/typebox";
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
  /** The body, read as strict JSON and checked against the route's `schema.body` (undefined without one). */
  readonly body: unknown;
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
  /** What Elysia checks before the handler (a failure is a 400) and documents in /openapi.json. */
  readonly schema?: RouteSchema;
  /** The OpenAPI operation's own fields (operationId, summary, description, security). */
  readonly detail: Readonly<Record<string, unknown>>;
}

export interface RouteSchema {
  readonly params?: TObject;
  /**
   * Headers the handler reads and checks itself, documented only: Elysia checking them too
   * would build a headers object per request for what the handler's own parser refuses anyway.
   */
  readonly documentedHeaders?: TObject;
  readonly body?: TSchema;
  /** Status → the schema of that answer's body (its `description` is the answer's). */
  readonly response?: Readonly<Record<number, TSchema>>;
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

/** What one request carries from the entry through Elysia's hooks and back. */
export interface RequestState {
  readonly deps: RequestDeps;
  readonly fields: LogFields;
  tenant: string;
  /** The template of the route that answered; UNMATCHED_ROUTE until one does. */
  route: string;
}

// Keyed by the Request Elysia is handed: its hooks and handlers are given that same object.
const states = new WeakMap<Request, RequestState>();

/** From the entry on, `request`'s hooks and handlers find `state` by it. */
export function trackRequest(request: Request, state: RequestState): void {
  states.set(request, state);
}

/** The state of a request this pipeline is serving; a request from anywhere else is a bug. */
export function stateOf(request: Request): RequestState {
  const state = states.get(request);
  if (state === undefined) throw new Error("bug: a request reached the app outside the pipeline");
  return state;
}

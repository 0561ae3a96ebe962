// The API's route table: every route, once, with the schemas Elysia checks and documents.
// An idempotent operation is one line in OPERATIONS, its module under operations/, its
// migration, docs and tests; app.ts hands the table to Elysia.
import { Type as t, type TObject, type TSchema } from "@sinclair/typebox";
import { probeDatabase, type Sql } from "../shared/db.ts";
import { MAX_BODY_BYTES } from "./body.ts";
import { endpointOf, type Operation } from "../shared/operations/model.ts";
import { OPERATIONS } from "../shared/operations/index.ts";
import { operationHandler, RETRY_AFTER_S } from "./http/answers.ts";
import { invalidIdProblem, nounOf, type RequestContext, type Route } from "./http/context.ts";
import { Charge, ChargeBody, ChargeView, chargeView } from "../shared/operations/charges.ts";
import { Refund, RefundBody, refundView } from "../shared/operations/refunds.ts";
import { problemResponse } from "./problem.ts";
import { IdempotencyKeyHeader, Problem } from "./schemas.ts";
import { KEY_STATE_PATH, KeyStateView, keyStateHandler } from "./key-state.ts";

/** The idempotent operations: one line each, in lib/shared/operations/index.ts (the operations jobs read it too). */
export { OPERATIONS };

// /readyz answers "not ready" rather than hang when the database does not answer.
const READY_TIMEOUT_MS = 2000;
const bearer = [{ bearer: [] }];
const uuid = (noun: string) => t.String({ format: "uuid", description: `The ${noun}'s id` });

/** A problem answer's schema, described (the description is the answer's in /openapi.json). */
const problem = (description: string): TSchema => ({ ...Problem, description });
const unauthorized = problem("Missing, malformed, badly signed, expired, not yet valid, or wrong issuer/audience bearer token (WWW-Authenticate: Bearer)");
const described = (schema: TObject, description: string): TSchema => ({ ...schema, description });

/** The path parameters of a template, each a UUID ("/charges/:id" → { id }). */
function uuidParams(names: readonly string[]): TObject | undefined {
  if (names.length === 0) return undefined;
  return t.Object(Object.fromEntries(names.map((name) => [name, uuid(nounOf(name))])));
}

/** The route of an idempotent operation: what the core answers for every one, and its own refusals. */
export function operationRoute(op: Operation): Route {
  return {
    method: op.method,
    path: op.path,
    handle: operationHandler(op),
    schema: {
      params: uuidParams(op.uuidParams),
      documentedHeaders: t.Object({
        "idempotency-key": IdempotencyKeyHeader,
        prefer: t.Optional(t.String({ description: "RFC 7240: wait=N holds a request whose key is in flight up to N seconds (capped by the request timeout) for its outcome (Preference-Applied: wait=N); other values are ignored" })),
      }),
      body: op.body,
      response: {
        [op.status]: described(op.response, (op.status === 201 ? "Created" : "Done") + "; a replay of a completed request returns the stored response (Location; Idempotent-Replayed: true)"),
        400: problem(`Missing or invalid Idempotency-Key, body not JSON or not matching the schema${op.uuidParams.length > 0 ? ", or an id that is not a UUID" : ""}`),
        401: unauthorized,
        409: problem("A request with the same key is still in flight (Retry-After), also at the end of a Prefer: wait"),
        410: problem("The key's stored answer expired (IDEMPOTENCY_TTL_SECONDS) and its tombstone lives (IDEMPOTENCY_TOMBSTONE_SECONDS): nothing was done; Location and resource name the original resource"),
        413: problem(`Body over ${MAX_BODY_BYTES} bytes`),
        415: problem("Content-Type is not JSON"),
        422: problem("The key was used with another request"),
        503: problem("Database unavailable, or the token's signing keys could not be fetched (Retry-After)"),
        ...Object.fromEntries(Object.entries(op.refusals).map(([status, description]) => [Number(status), problem(description)])),
      },
    },
    detail: { operationId: op.name, summary: op.summary, description: `Idempotent: the key's scope is (tenant, key, "${endpointOf(op)}").`, security: bearer },
  };
}

export const ROUTES: readonly Route[] = [
  ...OPERATIONS.map(operationRoute),
  {
    method: "GET",
    path: "/charges/:id",
    handle: (ctx) => lookup(ctx, (sql, endsAt) => chargeView(sql, ctx.tenant, ctx.params.id!, endsAt)),
    schema: {
      params: uuidParams(["id"]),
      response: { 200: described(ChargeView, "The charge, with its refunded total"), 400: problem("Not a UUID"), 401: unauthorized, 404: problem("Unknown charge, or another tenant's") },
    },
    detail: { operationId: "getCharge", summary: "A charge, with its refunded total", security: bearer },
  },
  {
    method: "GET",
    path: "/charges/:id/refunds/:refundId",
    handle: (ctx) => lookup(ctx, (sql, endsAt) => refundView(sql, ctx.tenant, ctx.params.id!, ctx.params.refundId!, endsAt)),
    schema: {
      params: uuidParams(["id", "refundId"]),
      response: { 200: described(Refund, "The refund"), 400: problem("Not a UUID"), 401: unauthorized, 404: problem("Unknown refund or charge, or another tenant's") },
    },
    detail: { operationId: "getRefund", summary: "A refund of a charge", security: bearer },
  },
  {
    method: "GET",
    path: KEY_STATE_PATH,
    handle: keyStateHandler,
    schema: {
      documentedHeaders: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
      response: {
        200: described(KeyStateView, "The key's state for each operation; a key never used, whose tombstone has gone, or another tenant's reads unknown for all"),
        400: problem("Missing or invalid Idempotency-Key (over 255 characters, not visible ASCII, a malformed String)"),
        401: unauthorized,
      },
    },
    detail: { operationId: "getIdempotencyKey", summary: "A key's state, per operation: in flight, completed, parked, expired or unknown", security: bearer },
  },
  {
    method: "GET",
    path: "/healthz",
    handle: () => Response.json({ status: "ok" }),
    schema: { response: { 200: t.Object({ status: t.Literal("ok") }, { description: "The process runs" }) } },
    detail: { operationId: "health", summary: "Liveness: the process runs" },
  },
  {
    method: "GET",
    path: "/readyz",
    handle: async (ctx) =>
      (await probeDatabase(ctx.deps.sql, READY_TIMEOUT_MS)).up
        ? Response.json({ status: "ready" })
        : problemResponse("unavailable", "the database does not answer", {}, { "retry-after": RETRY_AFTER_S }),
    schema: { response: { 200: t.Object({ status: t.Literal("ready") }, { description: "The database answers" }), 503: problem("The database does not answer") } },
    detail: { operationId: "ready", summary: "Readiness: the database answers" },
  },
  {
    method: "GET",
    path: "/metrics",
    handle: (ctx) => (ctx.metrics ? ctx.metrics() : problemResponse("notFound", "metrics are not enabled")),
    schema: { response: { 200: t.String({ description: "Prometheus text exposition" }), 404: problem("No exposition wired in this process") } },
    detail: { operationId: "metrics", summary: "Prometheus metrics" },
  },
];

/** Every schema a route checks or documents: compiled at load by the edge worker, and the document's components. */
export const COMPONENTS: Readonly<Record<string, TObject>> = { ChargeBody, RefundBody, Charge, ChargeView, Refund, KeyStateView, Problem };
export const SCHEMAS: readonly TSchema[] = Object.values(COMPONENTS);

/**
 * A GET of one of the tenant's rows by the route's UUIDs: 400 for an id that is not one, 404
 * when there is no such row (or it is another tenant's), else its body.
 */
async function lookup(ctx: RequestContext, find: (sql: Sql, endsAt: number) => Promise<string | undefined>): Promise<Response> {
  const names = Object.keys(ctx.params);
  const badId = invalidIdProblem(ctx.params, names);
  if (badId) return badId;
  const body = await ctx.deps.core.read(find);
  // The row looked up is the one the route's last parameter names.
  const last = names[names.length - 1]!;
  if (body === undefined) return problemResponse("notFound", `no ${nounOf(last)} with id ${ctx.params[last]!.toLowerCase()}`);
  return new Response(body, { headers: { "content-type": "application/json;charset=utf-8" } });
}

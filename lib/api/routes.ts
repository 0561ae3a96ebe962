// The API's routes as Elysia plugins, one per group, each route with the TypeBox schemas Elysia
// checks and documents. An idempotent operation is one line in OPERATIONS
// (lib/charges/index.ts), its module beside it, its migration, docs and tests; app.ts
// composes the plugins.
import { Elysia } from "elysia";
import { withHeaders } from "@elysiajs/openapi";
import type { AdditionalReference } from "@elysiajs/openapi/types";
import { Type as t, type TObject, type TSchema } from "@sinclair/typebox";
import type { Sql } from "../platform/db.ts";
import { READY_MAX_AGE_MS } from "./readiness.ts";
import { MAX_BODY_BYTES } from "./body.ts";
import { endpointOf, type Operation } from "../idempotency/model.ts";
import { OPERATIONS } from "../charges/index.ts";
import { operationHandler, RETRY_AFTER_S } from "./http/answers.ts";
import { nounOf, type RequestContextPlugin, type RequestDeps } from "./http/context.ts";
import { authentication } from "./http/authentication.ts";
import { checkBody, DEFERRED_BODY, readBody, refuseBadIds } from "./http/checks.ts";
import { ChargeEvents, chargeEventsHandler, ChargeEventsQuery } from "./events-read.ts";
import { Charge, ChargeBody, ChargeView, chargeView } from "../charges/charges.ts";
import { Refund, RefundBody, refundView } from "../charges/refunds.ts";
import { problemResponse } from "./problem.ts";
import { IdempotencyKeyHeader, Problem } from "./schemas.ts";
import { KEY_STATE_PATH, KeyStateView, keyStateHandler } from "./key-state.ts";

/** The idempotent operations: one line each, in lib/charges/index.ts (the operations jobs read it too). */
export { OPERATIONS };

const bearer = [{ bearer: [] }];
const uuid = (noun: string) => t.String({ format: "uuid", description: `The ${noun}'s id` });

/** A problem answer's schema, described (the description is the answer's in /openapi.json). */
const problem = (description: string): TSchema => ({ ...Problem, description });
const overloaded = problem("Database unavailable, the token's signing keys could not be fetched, or too many requests in flight (Retry-After)");
const rateLimited = problem("The tenant is over its request rate, API_RATE_LIMIT (Retry-After)");
const unauthorized = problem("Missing, malformed, badly signed, expired, not yet valid, or wrong issuer/audience bearer token (WWW-Authenticate: Bearer)");
// The operations read Prefer themselves (answers.ts): documented here only.
const PreferHeader = t.Optional(
  t.String({ description: "RFC 7240: wait=N holds a request whose key is in flight up to N seconds (capped by the request timeout) for its outcome (Preference-Applied: wait=N); other values are ignored" }),
);
const described = (schema: TObject, description: string): TSchema => ({ ...schema, description });
// What an idempotent operation's success (201 or 200) carries besides its body.
const CREATED_HEADERS = { location: t.String(), "idempotent-replayed": t.Optional(t.Literal("true")) };

/** The path parameters of a template, each a UUID ("/charges/:id" → { id }). */
function uuidParams(names: readonly string[]): TObject | undefined {
  if (names.length === 0) return undefined;
  return t.Object(Object.fromEntries(names.map((name) => [name, uuid(nounOf(name))])));
}

/** What every idempotent operation may answer besides its own refusals, for /openapi.json. */
function operationResponses(op: Operation): Record<number, TSchema> {
  return {
    [op.status]: withHeaders(
      described(op.response, (op.status === 201 ? "Created" : "Done") + "; a replay of a completed request returns the stored response (Location; Idempotent-Replayed: true)"),
      CREATED_HEADERS,
    ),
    400: problem(`Missing or invalid Idempotency-Key, body not JSON or not matching the schema${op.uuidParams.length > 0 ? ", an id that is not a UUID" : ""}, or a Prefer wait that is not whole seconds (invalid-prefer)`),
    401: unauthorized,
    409: problem("A request with the same key is still in flight (request-in-flight, Retry-After; also at the end of a Prefer: wait), or the key's recovery data is unreadable and parked for an operator (idempotency-key-parked)"),
    410: problem("The key's stored answer expired (IDEMPOTENCY_TTL_SECONDS) and its tombstone lives (IDEMPOTENCY_TOMBSTONE_SECONDS): nothing was done; Location and resource name the original resource"),
    429: rateLimited,
    413: problem(`Body over ${MAX_BODY_BYTES} bytes`),
    415: problem("Content-Type is not JSON"),
    422: problem("The key was used with another request"),
    503: overloaded,
    ...Object.fromEntries(Object.entries(op.refusals).map(([status, description]) => [Number(status), problem(description)])),
  };
}

/**
 * The /charges routes, behind the bearer token: each idempotent operation (one line in
 * OPERATIONS) and the GETs of what they wrote. Every hook of a route runs after the token's
 * derive; its own transform reads and checks what Elysia would otherwise check after it
 * (checks.ts), so no Elysia validation error is ever built from a request.
 */
export function chargeRoutes(context: RequestContextPlugin) {
  const routes = new Elysia({ name: "charge-routes" }).use(authentication(context));
  for (const op of OPERATIONS) {
    const handle = operationHandler(op);
    routes.post(op.path, async (ctx) => handle({ request: ctx.request, params: ctx.params, body: ctx.body, tenant: ctx.tenant, deps: ctx.deps, fields: ctx.trail.fields, span: ctx.trail.span }), {
      params: uuidParams(op.uuidParams),
      body: op.body,
      parse: DEFERRED_BODY,
      // Elysia's order: the body read (415, 413, strict JSON), then the ids, then the body's schema.
      transform: async (ctx) => {
        const value = await readBody(ctx.request);
        refuseBadIds(ctx.params);
        ctx.body = checkBody(op.body, value);
      },
      response: operationResponses(op),
      detail: { operationId: op.name, summary: op.summary, description: `Idempotent: the key's scope is (tenant, key, "${endpointOf(op)}").`, security: bearer },
    });
  }
  return routes
    .get(KEY_STATE_PATH, async (ctx) => keyStateHandler({ request: ctx.request, tenant: ctx.tenant, deps: ctx.deps, fields: ctx.trail.fields }), {
      response: {
        200: described(KeyStateView, "The key's state for each operation; a key never used, whose tombstone has gone, or another tenant's reads unknown for all"),
        400: problem("Missing or invalid Idempotency-Key (over 255 characters, not visible ASCII, a malformed String)"),
        401: unauthorized,
        429: rateLimited,
        503: overloaded,
      },
      detail: { operationId: "getIdempotencyKey", summary: "A key's state, per operation: in flight, completed, parked, expired or unknown", security: bearer },
    })
    .get("/charges/:id", async (ctx) => lookup(ctx, ctx.params, (sql, endsAt) => chargeView(sql, ctx.tenant, ctx.params.id, endsAt)), {
      params: t.Object({ id: uuid("charge") }),
      transform: ({ params }) => refuseBadIds(params),
      response: {
        200: described(ChargeView, "The charge, with its refunded total"),
        400: problem("Not a UUID"),
        401: unauthorized,
        404: problem("Unknown charge, or another tenant's"),
        429: rateLimited,
        503: overloaded,
      },
      detail: { operationId: "getCharge", summary: "A charge, with its refunded total", security: bearer },
    })
    .get("/charges/:id/events", async (ctx) => chargeEventsHandler({ request: ctx.request, params: ctx.params, tenant: ctx.tenant, deps: ctx.deps }), {
      params: t.Object({ id: uuid("charge") }),
      transform: ({ params }) => refuseBadIds(params),
      response: {
        200: described(ChargeEvents, "The charge's published events after `after`, in sequence order, each the envelope the broker carried (byte for byte), while the outbox keeps them (OUTBOX_RETENTION_SECONDS); Link rel=\"next\" when there are more"),
        400: problem("Not a UUID (invalid-id), or `after` not an integer from 0 to 2147483647 (invalid-query)"),
        401: unauthorized,
        404: problem("Unknown charge, or another tenant's"),
        429: rateLimited,
        503: problem("Database unavailable or slower than the request's time bounds, or too many requests in flight (Retry-After)"),
      },
      detail: {
        operationId: "getChargeEvents",
        summary: "A charge's events, as the broker carried them",
        description: "The MQTT payloads of the relay's AsyncAPI document (its GET /asyncapi.json), read back from the outbox: a subscriber fills here a gap in a charge's sequence that the broker will never fill.",
        security: bearer,
      },
    })
    .get(
      "/charges/:id/refunds/:refundId",
      async (ctx) => lookup(ctx, ctx.params, (sql, endsAt) => refundView(sql, ctx.tenant, ctx.params.id, ctx.params.refundId, endsAt)),
      {
        params: t.Object({ id: uuid("charge"), refundId: uuid("refund") }),
        transform: ({ params }) => refuseBadIds(params),
        response: {
          200: described(Refund, "The refund"),
          400: problem("Not a UUID"),
          401: unauthorized,
          404: problem("Unknown refund or charge, or another tenant's"),
          429: rateLimited,
          503: overloaded,
        },
        detail: { operationId: "getRefund", summary: "A refund of a charge", security: bearer },
      },
    );
}

/** The operator's routes, without a token: liveness, readiness, Prometheus. */
export function operatorRoutes(context: RequestContextPlugin, metrics: (() => Promise<Response>) | undefined) {
  return new Elysia({ name: "operator-routes" })
    .use(context)
    .get("/healthz", () => Response.json({ status: "ok" }), {
      response: { 200: t.Object({ status: t.Literal("ok") }, { description: "The process runs" }) },
      detail: { operationId: "health", summary: "Liveness: the process runs" },
    })
    .get(
      "/readyz",
      async ({ deps }) =>
        (await deps.readiness.check(deps.sql))
          ? Response.json({ status: "ready" })
          : problemResponse("unavailable", "the database does not answer", {}, { "retry-after": RETRY_AFTER_S }),
      {
        response: {
          200: t.Object({ status: t.Literal("ready") }, { description: `The database answered (a probe at most ${READY_MAX_AGE_MS} ms old)` }),
          503: problem("The database does not answer"),
        },
        detail: { operationId: "ready", summary: "Readiness: the database answers" },
      },
    )
    .get("/metrics", async () => (metrics ? metrics() : problemResponse("notFound", "metrics are not enabled")), {
      response: { 200: t.String({ description: "Prometheus text exposition" }), 404: problem("No exposition wired in this process") },
      detail: { operationId: "metrics", summary: "Prometheus metrics" },
    });
}

/** The headers the operations read themselves, for the document only (@elysiajs/openapi's references). */
export function documentedHeaders(): AdditionalReference {
  const headers = t.Object({ "idempotency-key": IdempotencyKeyHeader, prefer: PreferHeader });
  const reference: AdditionalReference = {};
  // Only `headers` is read from an entry; @elysiajs/openapi's type asks for every slot.
  for (const op of OPERATIONS) reference[op.path] = { ...reference[op.path], post: { params: t.Object({}), query: t.Object({}), headers, body: t.Object({}), response: {} } };
  // GET /charges/idempotency-key reads the key from the header its POST sent it in.
  reference[KEY_STATE_PATH] = { get: { params: t.Object({}), query: t.Object({}), headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }), body: t.Object({}), response: {} } };
  // GET /charges/:id/events reads `after` itself (its own invalid-query problem).
  reference["/charges/:id/events"] = { get: { params: t.Object({}), query: ChargeEventsQuery, headers: t.Object({}), body: t.Object({}), response: {} } };
  return reference;
}

/** Every schema a route checks or documents: compiled at load by the edge worker, and the document's components. */
export const COMPONENTS: Readonly<Record<string, TObject>> = { ChargeBody, RefundBody, Charge, ChargeView, Refund, ChargeEvents, KeyStateView, Problem };
export const SCHEMAS: readonly TSchema[] = Object.values(COMPONENTS);

/**
 * A GET of one of the tenant's rows by the route's UUIDs: 400 for an id that is not one, 404
 * when there is no such row (or it is another tenant's), else its body.
 */
async function lookup(ctx: { readonly deps: RequestDeps }, params: Readonly<Record<string, string>>, find: (sql: Sql, endsAt: number) => Promise<string | undefined>): Promise<Response> {
  const names = Object.keys(params);
  const body = await ctx.deps.core.read(find);
  // The row looked up is the one the route's last parameter names.
  const last = names[names.length - 1]!;
  if (body === undefined) return problemResponse("notFound", `no ${nounOf(last)} with id ${params[last]!.toLowerCase()}`);
  return new Response(body, { headers: { "content-type": "application/json;charset=utf-8" } });
}

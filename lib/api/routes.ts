// The API's routes as Elysia plugins, with the schemas Elysia validates (withFixedErrors) and documents;
// answers are bytes checked when written, so response schemas only document.
import { Elysia } from "elysia";
import { withHeaders } from "@elysiajs/openapi";
import { Type as t, type TObject, type TSchema } from "@sinclair/typebox";
import type { Sql } from "../platform/db.ts";
import { READY_MAX_AGE_MS } from "./readiness.ts";
import { MAX_BODY_BYTES } from "./body.ts";
import { endpointOf, type Operation } from "../idempotency/model.ts";
import { OPERATIONS } from "../charges/index.ts";
import { operationHandler, RETRY_AFTER_S } from "./http/answers.ts";
import { nounOf, type RequestContextPlugin, type RequestDeps } from "./http/context.ts";
import { authentication } from "./http/authentication.ts";
import { bodyParser, withFixedErrors } from "./http/checks.ts";
import { ChargeEvents, chargeEventsHandler, ChargeEventsQuery } from "./events-read.ts";
import { Charge, ChargeBody, ChargeView, chargeView } from "../charges/charges.ts";
import { Refund, RefundBody, refundView } from "../charges/refunds.ts";
import { problemResponse } from "./problem.ts";
import { IdempotencyKeyHeader, PreferHeader, Problem } from "./schemas.ts";
import { KEY_STATE_PATH, KeyStateView, keyStateHandler } from "./key-state.ts";

export { OPERATIONS };

const uuid = (noun: string) => t.String({ format: "uuid", description: `The ${noun}'s id` });

const problem = (description: string): TSchema => ({ ...Problem, description });
const overloaded = problem("Database unavailable, the token's signing keys could not be fetched, or too many requests in flight (Retry-After)");
const rateLimited = problem("The tenant is over its request rate, API_RATE_LIMIT (Retry-After)");
const unauthorized = problem("Missing, malformed, badly signed, expired, not yet valid, or wrong issuer/audience bearer token (WWW-Authenticate: Bearer)");
const ADMISSION = { 401: unauthorized, 429: rateLimited, 503: overloaded };
// The headers an idempotent operation reads (their formats are their parsers: schemas.ts).
const OPERATION_HEADERS = withFixedErrors(t.Object({ "idempotency-key": IdempotencyKeyHeader, prefer: t.Optional(PreferHeader) }));
const KEY_HEADERS = withFixedErrors(t.Object({ "idempotency-key": IdempotencyKeyHeader }));
// Elysia sets a response schema's missing additionalProperties to false the first time it answers:
// the copy says true, so the document is the same whatever was answered before it.
const described = (schema: TObject, description: string): TSchema => ({ ...schema, additionalProperties: schema.additionalProperties ?? true, description });
const CREATED_HEADERS = { location: t.String(), "idempotent-replayed": t.Optional(t.Literal("true")) };

function bearerDetail(operationId: string, tag: string, summary: string, description: string) {
  return { operationId, summary, description, tags: [tag], security: [{ bearer: [] }] };
}

const CHARGE_ID = withFixedErrors(t.Object({ id: uuid("charge") }));

function uuidParams(names: readonly string[]): TObject | undefined {
  if (names.length === 0) return undefined;
  return withFixedErrors(t.Object(Object.fromEntries(names.map((name) => [name, uuid(nounOf(name))]))));
}

function operationResponses(op: Operation): Record<number, TSchema> {
  return {
    [op.status]: withHeaders(
      described(op.response, (op.status === 201 ? "Created" : "Done") + "; a replay of a completed request returns the stored response (Location; Idempotent-Replayed: true)"),
      CREATED_HEADERS,
    ),
    400: problem(`Missing or invalid Idempotency-Key, body not JSON or not matching the schema${op.uuidParams.length > 0 ? ", an id that is not a UUID" : ""}, or a Prefer wait that is not whole seconds (invalid-prefer)`),
    ...ADMISSION,
    408: problem("The body did not arrive in full within API_BODY_TIMEOUT_MS of the request"),
    409: problem("A request with the same key is still in flight (request-in-flight, Retry-After; also at the end of a Prefer: wait), or the key's recovery data is unreadable and parked for an operator (idempotency-key-parked)"),
    410: problem("The key's stored answer expired (IDEMPOTENCY_TTL_SECONDS) and its tombstone lives (IDEMPOTENCY_TOMBSTONE_SECONDS): nothing was done; Location and resource name the original resource"),
    413: problem(`Body over ${MAX_BODY_BYTES} bytes`),
    415: problem("Content-Type is not JSON (an empty body needs none when no field is required)"),
    422: problem("The key was used with another request"),
    ...Object.fromEntries(Object.entries(op.refusals).map(([status, description]) => [Number(status), problem(description)])),
  };
}

function lookupResponses(found: TSchema, unknown: string): Record<number, TSchema> {
  return { 200: found, 400: problem("Not a UUID"), ...ADMISSION, 404: problem(`${unknown}, or another tenant's`) };
}

/** The /charges routes behind the bearer token: each operation of OPERATIONS, and GETs of what they wrote. */
export function chargeRoutes(context: RequestContextPlugin) {
  const routes = new Elysia({ name: "charge-routes" }).use(authentication(context));
  for (const op of OPERATIONS) {
    const handle = operationHandler(op);
    routes.post(op.path, async (ctx) => handle({ request: ctx.request, params: ctx.params, body: ctx.body, tenant: ctx.tenant, deps: ctx.deps, fields: ctx.trail.fields, span: ctx.trail.span }), {
      params: uuidParams(op.uuidParams),
      headers: OPERATION_HEADERS,
      body: withFixedErrors(op.body),
      // Ours (strict JSON, 415, 413), and the media type the document shows.
      parse: [bodyParser(op.body), "application/json"],
      response: operationResponses(op),
      detail: bearerDetail(
        op.name,
        op.path.includes("/refunds") ? "Refunds" : "Charges",
        op.summary,
        `Idempotent: the key's scope is (tenant, key, "${endpointOf(op)}"); a retry with the same key and body replays the first answer.`,
      ),
    });
  }
  return routes
    .get(KEY_STATE_PATH, async (ctx) => keyStateHandler({ request: ctx.request, tenant: ctx.tenant, deps: ctx.deps, fields: ctx.trail.fields }), {
      headers: KEY_HEADERS,
      response: {
        200: described(KeyStateView, "The key's state for each operation; a key never used, whose tombstone has gone, or another tenant's reads unknown for all"),
        400: problem("Missing or invalid Idempotency-Key (over 255 characters, not visible ASCII, a malformed String)"),
        ...ADMISSION,
      },
      detail: bearerDetail(
        "getIdempotencyKey",
        "Idempotency",
        "A key's state, per operation: in flight, completed, parked, expired or unknown",
        "The key travels in the Idempotency-Key header its POST sent it in; never cached by a shared cache (Cache-Control: private, no-store).",
      ),
    })
    .get("/charges/:id", async ({ deps, params, tenant }) => lookup(deps, params, (sql, endsAt) => chargeView(sql, tenant, params.id, endsAt)), {
      params: CHARGE_ID,
      response: lookupResponses(described(ChargeView, "The charge, with its refunded total"), "Unknown charge"),
      detail: bearerDetail("getCharge", "Charges", "A charge, with its refunded total", "Another tenant's charge is unknown alike (404)."),
    })
    .get("/charges/:id/events", async (ctx) => chargeEventsHandler({ request: ctx.request, params: ctx.params, tenant: ctx.tenant, deps: ctx.deps }), {
      params: CHARGE_ID,
      query: withFixedErrors(ChargeEventsQuery),
      response: {
        200: described(ChargeEvents, "The charge's published events after `after`, in sequence order, each the envelope the broker carried (byte for byte), while the outbox keeps them (OUTBOX_RETENTION_SECONDS); Link rel=\"next\" when there are more"),
        400: problem("Not a UUID (invalid-id), or `after` not an integer from 0 to 2147483647 (invalid-query)"),
        ...ADMISSION,
        404: problem("Unknown charge, or another tenant's"),
        503: problem("Database unavailable or slower than the request's time bounds, or too many requests in flight (Retry-After)"),
      },
      detail: bearerDetail(
        "getChargeEvents",
        "Charges",
        "A charge's events, as the broker carried them",
        "The MQTT payloads of the relay's AsyncAPI document (its GET /asyncapi.json), read back from the outbox: a subscriber fills here a gap in a charge's sequence that the broker will never fill.",
      ),
    })
    .get(
      "/charges/:id/refunds/:refundId",
      async ({ deps, params, tenant }) => lookup(deps, params, (sql, endsAt) => refundView(sql, tenant, params.id, params.refundId, endsAt)),
      {
        params: withFixedErrors(t.Object({ id: uuid("charge"), refundId: uuid("refund") })),
        response: lookupResponses(described(Refund, "The refund"), "Unknown refund or charge"),
        detail: bearerDetail("getRefund", "Refunds", "A refund of a charge", "A refund of another charge, or another tenant's, is unknown alike (404)."),
      },
    );
}

// The operator's routes need no token: an empty security requirement says so in the document.
const PUBLIC = { tags: ["Operator"], security: [] };

export function operatorRoutes(context: RequestContextPlugin, metrics: (() => Promise<Response>) | undefined) {
  return new Elysia({ name: "operator-routes" })
    .use(context)
    .get("/healthz", () => Response.json({ status: "ok" }), {
      response: { 200: t.Object({ status: t.Literal("ok") }, { additionalProperties: false, description: "The process runs" }) },
      detail: { operationId: "health", summary: "Liveness: the process runs", description: "Answers while the process serves requests; it asks nothing of the database.", ...PUBLIC },
    })
    .get(
      "/readyz",
      async ({ deps }) =>
        (await deps.readiness.check(deps.sql))
          ? Response.json({ status: "ready" })
          : problemResponse("unavailable", "the database does not answer", {}, { "retry-after": RETRY_AFTER_S }),
      {
        response: {
          200: t.Object({ status: t.Literal("ready") }, { additionalProperties: false, description: `The database answered (a probe at most ${READY_MAX_AGE_MS} ms old)` }),
          503: problem("The database does not answer"),
        },
        detail: { operationId: "ready", summary: "Readiness: the database answers", description: "A load balancer sends requests here only while this answers 200.", ...PUBLIC },
      },
    )
    .get("/metrics", async () => (metrics ? metrics() : problemResponse("notFound", "metrics are not enabled")), {
      response: { 200: t.String({ description: "Prometheus text exposition" }), 404: problem("No exposition wired in this process") },
      detail: { operationId: "metrics", summary: "Prometheus metrics", description: "The process's metrics in the Prometheus text format, for a scraper.", ...PUBLIC },
    });
}

/** The document's shared schemas, and each other operation's body as e.g. "CaptureChargeBody". */
export function components(): Readonly<Record<string, TSchema>> {
  const named: Record<string, TSchema> = { ChargeBody, RefundBody, Charge, ChargeView, Refund, ChargeEvents, KeyStateView, Problem };
  const known = new Set(Object.values(named));
  for (const op of OPERATIONS) {
    if (!known.has(op.body)) named[`${op.name[0]!.toUpperCase()}${op.name.slice(1)}Body`] = op.body;
  }
  return named;
}

/** Every schema the API checks itself: compiled at load by the edge worker. */
export const SCHEMAS: readonly TSchema[] = Object.values(components());

/** A GET of one of the tenant's rows by the route's UUIDs: 404 when none (or another tenant's), else its body. */
async function lookup(deps: RequestDeps, params: Readonly<Record<string, string>>, find: (sql: Sql, endsAt: number) => Promise<string | undefined>): Promise<Response> {
  const body = await deps.core.read(find);
  const last = Object.keys(params).at(-1)!;
  if (body === undefined) return problemResponse("notFound", `no ${nounOf(last)} with id ${params[last]!.toLowerCase()}`);
  return new Response(body, { headers: { "content-type": "application/json;charset=utf-8" } });
}

// The API's route table: every route, once. An idempotent operation is one line here
// (operationRoute), its module under operations/, its migration, docs and tests.
import { probeDatabase, type Sql } from "../shared/db.ts";
import type { TSchema } from "@sinclair/typebox";
import { operationRoute, RETRY_AFTER_S } from "./http/operation-route.ts";
import { openApiDocument, problem, resource, unauthorized } from "./http/openapi.ts";
import { invalidIdProblem, nounOf, type RequestContext, type Route } from "./http/router.ts";
import { Charge, ChargeView, chargeView, createCharge } from "./operations/charges.ts";
import { createRefund, Refund, refundView } from "./operations/refunds.ts";
import { problemResponse } from "./problem.ts";
import { Problem } from "./schemas.ts";

// /readyz answers "not ready" rather than hang when the database does not answer.
const READY_TIMEOUT_MS = 2000;
const bearer = [{ bearer: [] }];
const idParam = (name: string) => ({ name, in: "path", required: true, schema: { type: "string", format: "uuid" } });

export const ROUTES: readonly Route[] = [
  operationRoute(createCharge),
  operationRoute(createRefund),
  {
    method: "GET",
    path: "/charges/:id",
    handle: (ctx) => lookup(ctx, (sql, endsAt) => chargeView(sql, ctx.tenant, ctx.params.id!, endsAt)),
    openapi: {
      operationId: "getCharge",
      security: bearer,
      parameters: [idParam("id")],
      responses: { "200": resource("The charge, with its refunded total", "ChargeView"), "400": problem("Not a UUID"), "401": unauthorized, "404": problem("Unknown charge, or another tenant's") },
    },
  },
  {
    method: "GET",
    path: "/charges/:id/refunds/:refundId",
    handle: (ctx) => lookup(ctx, (sql, endsAt) => refundView(sql, ctx.tenant, ctx.params.id!, ctx.params.refundId!, endsAt)),
    openapi: {
      operationId: "getRefund",
      security: bearer,
      parameters: [idParam("id"), idParam("refundId")],
      responses: { "200": resource("The refund", "Refund"), "400": problem("Not a UUID"), "401": unauthorized, "404": problem("Unknown refund or charge, or another tenant's") },
    },
  },
  { method: "GET", path: "/healthz", handle: () => Response.json({ status: "ok" }), openapi: { responses: { "200": { description: "The process runs" } } } },
  {
    method: "GET",
    path: "/readyz",
    handle: async (ctx) =>
      (await probeDatabase(ctx.deps.sql, READY_TIMEOUT_MS)).up
        ? Response.json({ status: "ready" })
        : problemResponse("unavailable", "the database does not answer", {}, { "retry-after": RETRY_AFTER_S }),
    openapi: { responses: { "200": { description: "The database answers" }, "503": problem("It does not") } },
  },
  {
    method: "GET",
    path: "/metrics",
    handle: (ctx) => (ctx.metrics ? ctx.metrics() : problemResponse("notFound", "metrics are not enabled")),
    openapi: { responses: { "200": { description: "Prometheus text exposition" } } },
  },
  { method: "GET", path: "/openapi.json", handle: () => Response.json(apiDocument()), openapi: { responses: { "200": { description: "This document" } } } },
];

/** Every schema a route checks or documents: compiled at load by the edge worker. */
export const SCHEMAS: readonly TSchema[] = [createCharge.body, createRefund.body, Charge, ChargeView, Refund];

let document: Record<string, unknown> | undefined;
function apiDocument(): Record<string, unknown> {
  document ??= openApiDocument(ROUTES, { ChargeBody: createCharge.body, RefundBody: createRefund.body, Charge, ChargeView, Refund, Problem });
  return document;
}

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

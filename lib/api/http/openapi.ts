// The OpenAPI document, built from the route table and the very TypeBox schemas that
// validate requests: a route appears in it because it is served, and with the schema it is
// checked against.
import type { TSchema } from "@sinclair/typebox";
import { MAX_BODY_BYTES } from "../body.ts";
import { endpointOf, type Operation } from "../core/operation.ts";
import { PROBLEM_BASE } from "../problem.ts";
import { IdempotencyKeyHeader } from "../schemas.ts";
import { openApiPath, type Route } from "./router.ts";

export const problem = (description: string) => ({
  description,
  content: { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } },
});

/** A JSON body of the named component schema. */
export const resource = (description: string, schema: string, headers: Record<string, unknown> = {}) => ({
  description,
  ...(Object.keys(headers).length > 0 && { headers }),
  content: { "application/json": { schema: { $ref: `#/components/schemas/${schema}` } } },
});

export const unauthorized = problem("Missing, malformed, badly signed, expired, not yet valid, or wrong issuer/audience bearer token (WWW-Authenticate: Bearer)");

/** The OpenAPI operation of an idempotent operation: what the core answers for every one, and its own refusals. */
export function describeOperation(op: Operation): Record<string, unknown> {
  // The components are named after the operation: createRefund's are RefundBody and Refund.
  const noun = op.name.replace(/^create/, "");
  const uuidParams = op.uuidParams.map((name) => ({ name, in: "path", required: true, schema: { type: "string", format: "uuid" } }));
  return {
    operationId: op.name,
    description: `Idempotent: the key's scope is (tenant, key, "${endpointOf(op)}").`,
    security: [{ bearer: [] }],
    parameters: [...uuidParams, { name: "Idempotency-Key", in: "header", required: true, schema: IdempotencyKeyHeader }],
    requestBody: { required: true, content: { "application/json": { schema: { $ref: `#/components/schemas/${noun}Body` } } } },
    responses: {
      [String(op.status)]: resource("Created; a replay of a completed request returns the stored response (Idempotent-Replayed: true)", noun, {
        Location: { schema: { type: "string" } },
        "Idempotent-Replayed": { schema: { type: "string", enum: ["true"] } },
      }),
      "400": problem(`Missing or invalid Idempotency-Key, body not JSON or not matching the schema${uuidParams.length > 0 ? ", or an id that is not a UUID" : ""}`),
      "401": unauthorized,
      "409": problem("A request with the same key is still in flight (Retry-After)"),
      "413": problem(`Body over ${MAX_BODY_BYTES} bytes`),
      "415": problem("Content-Type is not JSON"),
      "422": problem("The key was used with another request"),
      "503": problem("Database unavailable, or the token's signing keys could not be fetched (Retry-After)"),
      ...Object.fromEntries(Object.entries(op.refusals).map(([status, description]) => [status, problem(description)])),
    },
  };
}

/** The document of `routes`, with `schemas` as its components. */
export function openApiDocument(routes: readonly Route[], schemas: Readonly<Record<string, TSchema>>): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = openApiPath(route.path);
    paths[path] = { ...paths[path], [route.method.toLowerCase()]: route.openapi };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Charges",
      version: "0.2.0",
      description: `Idempotent charges and refunds with a transactional outbox. Problem types live under ${PROBLEM_BASE}.`,
    },
    paths,
    components: {
      schemas,
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "HS256 with the API's AUTH_JWT_SECRET, or a key at AUTH_JWKS_URL; the tenant is the sub claim (or AUTH_TENANT_CLAIM)",
        },
      },
    },
  };
}

// The OpenAPI document, built from the very TypeBox schemas that validate requests.
import { MAX_BODY_BYTES } from "./body.ts";
import { PROBLEM_BASE } from "./problem.ts";
import { Charge, ChargeBody, IdempotencyKeyHeader, Problem } from "./schemas.ts";

const problem = (description: string) => ({
  description,
  content: { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } },
});
const charge = (description: string, replay: boolean) => ({
  description,
  headers: {
    Location: { schema: { type: "string" }, description: "/charges/<id>" },
    ...(replay ? { "Idempotent-Replayed": { schema: { type: "string", enum: ["true"] } } } : {}),
  },
  content: { "application/json": { schema: { $ref: "#/components/schemas/Charge" } } },
});

// Every charge route answers 401 without a valid token; the operator endpoints declare no security.
const bearer = [{ bearer: [] }];
const unauthorized = problem("Missing, malformed, badly signed, expired, not yet valid, or wrong issuer/audience bearer token (WWW-Authenticate: Bearer)");

let cached: Record<string, unknown> | undefined;

export function openApiDocument(): Record<string, unknown> {
  cached ??= {
    openapi: "3.1.0",
    info: {
      title: "Charges",
      version: "0.1.0",
      description: `Idempotent charge creation with a transactional outbox. Problem types live under ${PROBLEM_BASE}.`,
    },
    paths: {
      "/charges": {
        post: {
          operationId: "createCharge",
          security: bearer,
          parameters: [{ name: "Idempotency-Key", in: "header", required: true, schema: IdempotencyKeyHeader }],
          requestBody: { required: true, content: { "application/json": { schema: { $ref: "#/components/schemas/ChargeBody" } } } },
          responses: {
            "201": charge("Created; a replay of a completed request returns the stored response (Idempotent-Replayed: true)", true),
            "400": problem("Missing or invalid Idempotency-Key, body not JSON or not matching the schema"),
            "401": unauthorized,
            "409": problem("A request with the same key is still in flight (Retry-After)"),
            "413": problem(`Body over ${MAX_BODY_BYTES} bytes`),
            "415": problem("Content-Type is not JSON"),
            "422": problem("The key was used with another request"),
            "503": problem("Database unavailable, or the token's signing keys could not be fetched (Retry-After)"),
          },
        },
      },
      "/charges/{id}": {
        get: {
          operationId: "getCharge",
          security: bearer,
          parameters: [{ name: "id", in: "path", required: true, schema: { type: "string", format: "uuid" } }],
          responses: {
            "200": charge("The charge", false),
            "400": problem("Not a UUID"),
            "401": unauthorized,
            "404": problem("Unknown charge, or another tenant's"),
          },
        },
      },
      "/healthz": { get: { responses: { "200": { description: "The process runs" } } } },
      "/readyz": { get: { responses: { "200": { description: "The database answers" }, "503": problem("It does not") } } },
      "/metrics": { get: { responses: { "200": { description: "Prometheus text exposition" } } } },
    },
    components: {
      schemas: { ChargeBody, Charge, Problem },
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
  return cached;
}

// /openapi.json and /docs (@elysiajs/openapi) from the routes' schemas; the plugin inlines every schema,
// the document served $refs each shared one, with what a linter asks: a server, tags, a 431 everywhere.
import { openapi } from "@elysiajs/openapi";
import type { TSchema } from "@sinclair/typebox";
import { isFixedError } from "./http/checks.ts";
import { PROBLEM_BASE } from "./problem.ts";
import { components } from "./routes.ts";

/** The interactive reference's assets (no CDN): the page names `script` and `stylesheet` of `files`. */
export interface DocsAssets {
  readonly files: Readonly<Record<string, (request: Request) => Promise<Response>>>;
  readonly script: string;
  readonly stylesheet: string;
}

export const DOCUMENT_PATH = "/openapi.json";
export const PAGE_PATH = "/docs";

const DOCUMENT_INFO = {
  title: "Charges",
  version: "0.3.0",
  description: `Idempotent charges and refunds with a transactional outbox. Problem types live under ${PROBLEM_BASE}.`,
  contact: { name: "charges-outbox maintainers" },
  license: { name: "UNLICENSED", identifier: "LicenseRef-UNLICENSED" },
};
const BEARER_SCHEME = {
  type: "http",
  scheme: "bearer",
  bearerFormat: "JWT",
  description: "HS256 with the API's AUTH_JWT_SECRET, or a key at AUTH_JWKS_URL; the tenant is the sub claim (or AUTH_TENANT_CLAIM)",
} as const;
// Relative: the API is reached where the document was fetched from, whatever the deployment.
const SERVERS = [{ url: "/", description: "This API, where this document is served" }];
const TAGS = [
  { name: "Charges", description: "Charges: create one (idempotent), capture or cancel a manual one, read it and its events" },
  { name: "Refunds", description: "Refunds of a charge: create one (idempotent), read it" },
  { name: "Idempotency", description: "The state of an Idempotency-Key" },
  { name: "Operator", description: "Liveness, readiness and metrics, without a token" },
];
const HEADERS_TOO_LARGE = { description: "Request headers over the runtime's limit (Bun's: 16 KiB), answered by the runtime without a body" };

export function documentation(docs: DocsAssets | undefined) {
  const named = components();
  const plugin = openapi({
    path: PAGE_PATH,
    specPath: DOCUMENT_PATH,
    openapiVersion: "3.1.0",
    provider: docs ? "swagger-ui" : null,
    // No validator badge: Swagger UI would send the document to its public validator.
    swagger: docs && { cdn: docs.script, theme: docs.stylesheet, autoDarkMode: false, displayOperationId: true, validatorUrl: "none" },
    documentation: { info: DOCUMENT_INFO, servers: SERVERS, tags: TAGS, components: { schemas: named as Record<string, never>, securitySchemes: { bearer: BEARER_SCHEME } } },
  });
  // The plugin's route builds the document: served referenced (asked once: app.ts documentRoutes).
  const route = plugin.routes.find((r) => r.path === DOCUMENT_PATH && r.method === "GET");
  if (route === undefined) throw new Error("bug: @elysiajs/openapi serves no document route");
  const build = route.handler as (ctx: unknown) => object;
  route.handler = (ctx: unknown) => referenced(build(ctx) as Document, named);
  return plugin;
}

interface Document {
  readonly paths: Record<string, Record<string, { responses?: Record<string, unknown>; security?: readonly Record<string, unknown>[] }>>;
  readonly components: { readonly schemas: Record<string, unknown>; readonly securitySchemes?: Record<string, unknown> };
}

/** `document` with each schema equal to a named component (shapeOf) a $ref to it, and 431 everywhere. */
function referenced(document: Document, named: Readonly<Record<string, TSchema>>): Document {
  const byShape = new Map(Object.entries(named).map(([name, schema]) => [shapeOf(schema), name]));
  const refer = (node: unknown, root: boolean): unknown => {
    if (Array.isArray(node)) return node.map((item) => refer(item, false));
    if (node === null || typeof node !== "object") return node;
    const name = root ? undefined : byShape.get(shapeOf(node));
    if (name !== undefined) return { $ref: `#/components/schemas/${name}` };
    return Object.fromEntries(Object.entries(node).filter(([key, value]) => !isFixedError(key, value)).map(([key, value]) => [key, refer(value, false)]));
  };
  const paths = refer(document.paths, true) as Document["paths"];
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) operation.responses = { ...operation.responses, 431: HEADERS_TOO_LARGE };
  }
  const schemas = Object.fromEntries(Object.entries(document.components.schemas).map(([name, schema]) => [name, refer(schema, true)]));
  return { ...document, paths, components: { ...document.components, schemas: usedBy(paths, schemas), securitySchemes: schemesOf(paths, document.components.securitySchemes) } };
}

/** The security schemes some operation requires: none on the operator's port. */
function schemesOf(paths: Document["paths"], schemes: Readonly<Record<string, unknown>> | undefined): Record<string, unknown> {
  const named = new Set(Object.values(paths).flatMap((operations) => Object.values(operations).flatMap((op) => (op.security ?? []).flatMap((requirement) => Object.keys(requirement)))));
  return Object.fromEntries(Object.entries(schemes ?? {}).filter(([name]) => named.has(name)));
}

/** The components `paths` refer to, directly or through another. */
function usedBy(paths: unknown, schemas: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const used = new Set<string>();
  const pending = [paths];
  while (pending.length > 0) {
    for (const [, name] of JSON.stringify(pending.pop()).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)) {
      if (name === undefined || used.has(name)) continue;
      used.add(name);
      pending.push(schemas[name]);
    }
  }
  return Object.fromEntries(Object.entries(schemas).filter(([name]) => used.has(name)));
}

/** The JSON a schema is compared by: no description or fixed error, absent additionalProperties true. */
function shapeOf(schema: unknown): string {
  const { description: _description, ...rest } = enumsOf(schema) as Record<string, unknown>;
  if (rest.type === "object") rest.additionalProperties ??= true;
  return JSON.stringify(rest, (key, value: unknown) => (isFixedError(key, value) ? undefined : enumsOf(value)));
}

/** A union of constants as the plugin writes it in a route: a string enum. */
function enumsOf(node: unknown): unknown {
  if (node === null || typeof node !== "object" || !("anyOf" in node)) return node;
  const members = (node as { anyOf: unknown }).anyOf;
  if (!Array.isArray(members) || members.length === 0 || !members.every((m) => typeof m === "object" && m !== null && "const" in m)) return node;
  return { type: "string", enum: members.map((m: { const: unknown }) => m.const) };
}

// The API's document and its reference page, from the real `bun api.ts`: /openapi.json is
// valid OpenAPI 3.1 with every route, each operation's request and response schemas (each
// shared one a component, referenced), the problem answers, tags, security and the bearer scheme; /docs renders in a real browser (Debian's headless
// Chromium) from assets the API serves itself, and lists the operations by name.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv } from "../testkit/auth.ts";
import { chromiumBinary, renderedDom } from "../testkit/chromium.ts";
import { startTestApi } from "../testkit/api.ts";

setDefaultTimeout(90_000);

const db = await freshDatabase("api_docs");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", ...authEnv() } });
afterAll(async () => {
  await killAll();
  await db.drop();
});

interface Operation {
  operationId: string;
  description?: string;
  tags?: string[];
  security?: unknown;
  parameters?: unknown[];
  requestBody?: { content: Record<string, { schema: unknown }> };
  responses: Record<string, { description: string; content?: Record<string, { schema: Schema }> }>;
}
interface Schema {
  $ref?: string;
  properties?: Record<string, unknown>;
}
type Document = {
  openapi: string;
  servers?: { url: string }[];
  tags?: { name: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, unknown>; schemas: Record<string, Schema> };
};

const doc = (await (await fetch(`${api.base}/openapi.json`)).json()) as Document;
// The routes the app declares, from an in-process API on the same database.
const served = await startTestApi(db.url);
const ROUTES = served.routes;
afterAll(() => served.close());
const openApiPath = (template: string) => template.replace(/:([A-Za-z]+)/g, "{$1}");
/** A schema, its component when it is a $ref to one. */
const resolve = (schema: unknown): Schema => {
  const ref = (schema as Schema | undefined)?.$ref;
  return ref === undefined ? (schema as Schema) : doc.components.schemas[ref.slice("#/components/schemas/".length)]!;
};

describe("/openapi.json", () => {
  test("is valid OpenAPI 3.1", async () => {
    expect(doc.openapi).toBe("3.1.0");
    expect(await new Validator().validate(doc as unknown as Parameters<Validator["validate"]>[0])).toEqual({ valid: true });
  });

  test("has every route the API serves, and nothing else", () => {
    const documented = Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`));
    expect(documented.sort()).toEqual(ROUTES.map((r) => `${r.method} ${openApiPath(r.path)}`).sort());
  });

  test("each idempotent operation: its body's schema, its 201's, every problem answer, the bearer scheme", () => {
    for (const [path, id] of [["/charges", "createCharge"], ["/charges/{id}/refunds", "createRefund"]] as const) {
      const op = doc.paths[path]!.post!;
      expect(op.operationId).toBe(id);
      expect(op.security).toEqual([{ bearer: [] }]);
      expect(op.parameters).toContainEqual(expect.objectContaining({ name: "idempotency-key", in: "header", required: true }));
      expect(resolve(op.requestBody?.content["application/json"]?.schema)).toMatchObject({ type: "object", required: ["amountCents"], additionalProperties: false });
      expect(resolve(op.responses["201"]!.content!["application/json"]!.schema).properties).toHaveProperty("id");
      for (const status of ["400", "401", "409", "413", "415", "422", "503"]) {
        expect(resolve(op.responses[status]!.content!["application/json"]!.schema).properties).toHaveProperty("type");
      }
    }
    expect(doc.paths["/charges/{id}/refunds"]!.post!.responses["404"]).toBeDefined();
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer" });
  });

  test("names each schema once: every component is referenced, none is written out where a $ref would do", () => {
    const refs = new Set([...JSON.stringify(doc.paths).matchAll(/"\$ref":"#\/components\/schemas\/([A-Za-z]+)"/g)].map((m) => m[1]!));
    const components = doc.components.schemas;
    for (const name of Object.keys(components)) expect(refs).toContain(name);
    // An object schema in an operation with a component's members would be a copy of it.
    const members = (schema: Schema) => Object.keys(schema.properties ?? {}).join(",");
    const inline: string[] = [];
    const walk = (node: unknown): void => {
      if (node === null || typeof node !== "object") return;
      if ("properties" in node) inline.push(members(node as Schema));
      Object.values(node).forEach(walk);
    };
    walk(doc.paths);
    const copied = Object.entries(components).filter(([, schema]) => members(schema) !== "" && inline.includes(members(schema)));
    expect(copied.map(([name]) => name)).toEqual([]);
  });

  test("every operation has a tag the document declares, a description, and security ([] on the operator's)", () => {
    expect(doc.servers?.length).toBeGreaterThan(0);
    const tags = new Set((doc.tags ?? []).map((tag) => tag.name));
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const op of Object.values(methods)) {
        expect(op.tags?.every((tag) => tags.has(tag)) && op.tags.length > 0).toBe(true);
        expect(op.description?.length).toBeGreaterThan(0);
        expect(op.security).toEqual(path.startsWith("/charges") ? [{ bearer: [] }] : []);
      }
    }
  });
});

describe("/docs", () => {
  test("its page loads only what this API serves", async () => {
    const res = await fetch(`${api.base}/docs`);
    expect(res.status).toBe(200);
    const html = await res.text();
    const sources = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      expect(source.startsWith("/")).toBe(true);
      expect((await fetch(`${api.base}${source}`)).status).toBe(200);
    }
  });

  test.skipIf(chromiumBinary() === undefined)("renders in headless Chromium, listing the operations by name", async () => {
    const dom = await renderedDom(`${api.base}/docs`);
    for (const route of ROUTES) expect(dom).toContain(route.operationId);
    expect(dom).toContain("Create a charge");
  });
});

if (chromiumBinary() === undefined) console.warn("test/api-docs.test.ts: the browser test is skipped: `chromium` is not installed (apt-get install -y chromium; .ci/run installs it)");

test("the document, the page and its files are counted under their own routes on /metrics, not as unmatched", async () => {
  expect((await fetch(`${api.base}/openapi.json`)).status).toBe(200);
  expect((await fetch(`${api.base}/docs`)).status).toBe(200);
  expect((await fetch(`${api.base}/docs/swagger-ui.css`)).status).toBe(200);
  const text = await (await fetch(`${api.base}/metrics`)).text();
  for (const route of ["/openapi.json", "/docs", "/docs/swagger-ui.css"]) {
    expect(text).toContain(`http_server_request_duration_seconds_count{http_request_method="GET",http_route="${route}",http_response_status_code="200"}`);
  }
});

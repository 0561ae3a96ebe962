// The tables users look things up in, checked against the code so they cannot drift: the
// variables and their defaults (docs/configuration.md), the metrics and the values of their
// labels (docs/operations.md), the routes and whether they need a token, the problem types and
// the charge statuses (docs/api.md), the event payloads (docs/events.md), the README's ops
// jobs; and every link between the pages resolves, anchor included.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Glob } from "bun";
import { loadConfig } from "../lib/platform/config.ts";
import { PROBLEM_BASE, PROBLEMS } from "../lib/api/problem.ts";
import { AUTH_FAILURE_REASONS } from "../lib/api/auth.ts";
import { OPERATIONS } from "../lib/charges/index.ts";
import { EVENT_DATA_SCHEMAS, EVENT_TYPES } from "../lib/charges/events.ts";
import { OUTCOME_KINDS } from "../lib/idempotency/outcome.ts";
import { JOB_NAMES } from "../lib/ops/jobs.ts";
import { startTestApi } from "../testkit/api.ts";
import { freshDatabase } from "../testkit/services.ts";
import { ROOT } from "../testkit/processes.ts";

setDefaultTimeout(30_000);

const read = (file: string): string => readFileSync(join(ROOT, file), "utf8");

/** The rows of the first table whose header starts with `header`: cells, trimmed. */
function tableRows(markdown: string, header: string): string[][] {
  const lines = markdown.split("\n");
  const start = lines.findIndex((line) => line.startsWith(`| ${header} |`));
  if (start < 0) throw new Error(`no table with header "${header}"`);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((cell) => cell.trim()));
  }
  return rows;
}

/** The backticked words of a cell. */
const ticked = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

describe("docs/configuration.md", () => {
  const rows = tableRows(read("docs/configuration.md"), "variable");
  const documented = new Map(rows.map((row) => [ticked(row[0]!)[0]!, row[1]!]));
  // Bun reads this one itself; HYPERDRIVE is a workerd binding, not a variable (docs/edge.md).
  const notReadByOurCode = new Set(["BUN_CONFIG_MAX_HTTP_REQUESTS"]);
  const notVariables = new Set(["HYPERDRIVE"]);

  test("lists every variable the processes read, and only those", () => {
    const files = [...new Glob("lib/**/*.ts").scanSync(ROOT), "api.ts", "relay.ts", "ops.ts", "migrate.ts", "worker.ts", "token.ts", "examples/subscriber.ts", "examples/reference-subscriber.ts"];
    const read = new Set<string>();
    for (const file of files) {
      const text = readFileSync(join(ROOT, file), "utf8");
      for (const m of text.matchAll(/\benv\??\.([A-Z][A-Z0-9_]{2,})\b/g)) read.add(m[1]!);
      for (const m of text.matchAll(/\benv\[\s*"([A-Z][A-Z0-9_]{2,})"\s*\]/g)) read.add(m[1]!);
      for (const m of text.matchAll(/\benv,\s*"([A-Z][A-Z0-9_]+)"/g)) read.add(m[1]!);
    }
    for (const name of notVariables) read.delete(name);
    expect([...read].filter((name) => !documented.has(name)).sort()).toEqual([]);
    expect([...documented.keys()].filter((name) => !read.has(name) && !notReadByOurCode.has(name)).sort()).toEqual([]);
  });

  test("each default in backticks is the one the configuration takes when the variable is unset", () => {
    // The subscriber's API settings are read only when its URL is set.
    const base = { SUBSCRIBER_API_URL: "http://127.0.0.1:1", SUBSCRIBER_API_TOKEN: "token" };
    const unset = loadConfig(base);
    const checked: string[] = [];
    for (const [name, cell] of documented) {
      const value = ticked(cell)[0];
      // A default named after another variable (API_RATE_BURST's) is not a value to set.
      if (value === undefined || /^[A-Z][A-Z0-9_]+$/.test(value) || notReadByOurCode.has(name)) continue;
      let withDefault: unknown;
      try {
        withDefault = loadConfig({ ...base, [name]: value });
      } catch (error) {
        withDefault = `refused: ${String(error)}`;
      }
      expect({ variable: name, config: withDefault }).toEqual({ variable: name, config: unset });
      checked.push(name);
    }
    expect(checked.length).toBeGreaterThan(30);
  });
});

describe("docs/operations.md's metrics", () => {
  const rows = tableRows(read("docs/operations.md"), "name");
  const byName = new Map(rows.map((row) => [ticked(row[0]!)[0]!, row]));

  test("names every metric the code defines, and only those", () => {
    const names = new Set<string>();
    for (const file of new Glob("lib/**/*.ts").scanSync(ROOT)) {
      const text = readFileSync(join(ROOT, file), "utf8");
      for (const m of text.matchAll(/(?:create\w*|gauge)\(\s*"([a-z][a-z0-9]*(?:_[a-z0-9]+)+)"/g)) names.add(m[1]!);
      for (const m of text.matchAll(/_METRIC = "([a-z][a-z0-9_]+)"/g)) names.add(m[1]!);
    }
    expect(names.size).toBeGreaterThan(25);
    expect([...names].filter((name) => !byName.has(name)).sort()).toEqual([]);
    expect([...byName.keys()].filter((name) => !names.has(name)).sort()).toEqual([]);
  });

  /** The values a row lists for `label` (`label` = `a`, `b`; …). */
  function labelValues(metric: string, label: string): string[] {
    const cell = byName.get(metric)![2]!;
    const part = cell.split(";").find((p) => p.trim().startsWith(`\`${label}\` =`));
    if (part === undefined) throw new Error(`${metric}: no values listed for ${label}`);
    return ticked(part.split("=").slice(1).join("="));
  }

  test("lists the code's values of outcome, endpoint and reason", () => {
    expect(labelValues("idempotency_requests_total", "outcome").sort()).toEqual([...OUTCOME_KINDS].sort());
    expect(labelValues("idempotency_requests_total", "endpoint").sort()).toEqual(OPERATIONS.map((op) => `${op.method} ${op.path}`).sort());
    expect(labelValues("auth_failures_total", "reason").sort()).toEqual([...AUTH_FAILURE_REASONS].sort());
  });
});

const db = await freshDatabase("docs_facts");
const app = await startTestApi(db.url);

describe("docs/api.md", () => {
  const api = read("docs/api.md");
  afterAll(async () => {
    await app.close();
    await db.drop();
  });
  const call = (method: string, path: string): Promise<Response> => app.fetch(new Request(`http://localhost${path}`, { method }));
  const routes = tableRows(api, "route").map((row) => {
    const [method, path] = ticked(row[0]!)[0]!.split(" ") as [string, string];
    return { method, path, token: row[1] === "yes" };
  });

  test("the route table is the API's: every operation of /openapi.json, and whether it needs a token", async () => {
    const document = (await (await call("GET", "/openapi.json")).json()) as { paths: Record<string, Record<string, unknown>> };
    const served = Object.entries(document.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`));
    const listed = routes.map((r) => `${r.method} ${r.path}`);
    expect(served.filter((route) => !listed.includes(route)).sort()).toEqual([]);
    for (const route of routes) {
      const path = route.path.replace(/:\w+/g, () => crypto.randomUUID());
      const response = await call(route.method, path);
      await response.body?.cancel();
      // Without a token: 401 for the routes that need one, and never for the others.
      const answered = route.token ? response.status === 401 : response.status !== 401;
      expect({ route: `${route.method} ${route.path}`, status: response.status, asDocumented: answered }).toMatchObject({ asDocumented: true });
    }
  });

  test("the problem table is the API's: every type, with its status", () => {
    const listed = tableRows(api, "type").map((row) => [ticked(row[0]!)[0]!, Number(row[1])] as const);
    const all = Object.assign({ ...PROBLEMS }, ...OPERATIONS.map((op) => op.problems ?? {})) as Record<string, { slug: string; status: number }>;
    const served = Object.values(all).map((spec) => [spec.slug, spec.status] as const);
    expect([...listed].sort()).toEqual([...new Map(served)].sort());
    expect(api).toContain(`\`${PROBLEM_BASE}\``);
  });

  test("the charge statuses are the schema's", async () => {
    const document = JSON.stringify(await (await call("GET", "/openapi.json")).json());
    const line = api.split("\n").findIndex((l) => l.startsWith("Charge statuses:"));
    const listed = ticked(api.split("\n").slice(line, line + 2).join(" ")).filter((word) => /^[a-z]+$/.test(word)).sort();
    const schema = JSON.parse(document) as unknown;
    const statuses = new Set<string>();
    const walk = (node: unknown): void => {
      if (typeof node !== "object" || node === null) return;
      const status = (node as { properties?: { status?: { anyOf?: { const?: string }[]; enum?: string[] } } }).properties?.status;
      const values = status?.enum ?? status?.anyOf?.map((s) => s.const);
      if (values?.includes("authorized")) for (const v of values) if (v) statuses.add(v);
      for (const child of Object.values(node)) walk(child);
    };
    walk(schema);
    expect(listed).toEqual([...statuses].sort());
  });
});

describe("docs/events.md", () => {
  test("each event type's data is its schema's: every field, and which may be absent", () => {
    const rows = tableRows(read("docs/events.md"), "type");
    const listed = Object.fromEntries(rows.map((row) => [ticked(row[0]!)[0]!, ticked(row[1]!).sort()]));
    const code = Object.fromEntries(
      EVENT_TYPES.map((type) => {
        const schema = EVENT_DATA_SCHEMAS[type] as { properties: Record<string, unknown>; required?: string[] };
        return [type, Object.keys(schema.properties).map((field) => (schema.required?.includes(field) ? field : `${field}?`)).sort()];
      }),
    );
    expect(listed).toEqual(code);
  });
});

describe("README.md", () => {
  test("its ops row names every job and operator action of bun run ops", () => {
    const row = tableRows(read("README.md"), "command").find((r) => r[0]!.startsWith("`bun run ops"))!;
    const named = new Set(ticked(row[1]!).map((word) => word.split(" ")[0]!));
    for (const job of [...JOB_NAMES, "inbox-retention", "parked", "resolve", "requeue"]) expect({ job, named: named.has(job) }).toEqual({ job, named: true });
  });
});

describe("links between the pages", () => {
  // Pages other work adds; a link to one is allowed before it lands, never a wrong anchor in one that exists.
  const FORTHCOMING = new Set(["docs/architecture.md", "docs/subscriber.md", "docs/console.md"]);
  const pages = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

  test("every relative link names a page that exists and an anchor it has", () => {
    const broken: string[] = [];
    for (const page of pages) {
      const dir = page.includes("/") ? page.slice(0, page.lastIndexOf("/") + 1) : "";
      for (const m of read(page).matchAll(/\]\(([^)#\s]*)(?:#([^)\s]+))?\)/g)) {
        const [target, anchor] = [m[1]!, m[2]];
        if (/^[a-z]+:/.test(target)) continue;
        const file = target === "" ? page : normalize(dir + target);
        if (!existsSync(join(ROOT, file))) {
          if (!FORTHCOMING.has(file)) broken.push(`${page}: ${m[0]}`);
          continue;
        }
        if (anchor !== undefined && file.endsWith(".md") && !anchors(read(file)).has(anchor)) broken.push(`${page}: ${m[0]}`);
      }
    }
    expect(broken).toEqual([]);
  });
});

function normalize(path: string): string {
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== "." && part !== "") parts.push(part);
  }
  return parts.join("/");
}

/** GitHub's heading anchors. */
function anchors(markdown: string): Set<string> {
  const slugs = new Set<string>();
  for (const m of markdown.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = m[1]!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
    let slug = base;
    for (let n = 1; slugs.has(slug); n += 1) slug = `${base}-${n}`;
    slugs.add(slug);
  }
  return slugs;
}

// The operator's routes cost little, against a real `bun api.ts`: /metrics is rendered at most
// once per API_METRICS_MAX_AGE_MS however many scrape; the document, the page and the docs'
// assets are sent gzip-compressed when asked, with an ETag and Cache-Control, and 304 to a
// client that has them; past OPERATOR_RATE_PER_S they are held OPERATOR_HOLD_MS. And the
// cache of /metrics itself, with a clock of the test's.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { gunzipSync } from "node:zlib";
import { freshDatabase } from "../testkit/services.ts";
import { killAll, startEntrypoint } from "../testkit/processes.ts";
import { authEnv } from "../testkit/auth.ts";
import { cachedExposition } from "../lib/api/metrics.ts";
import { createAdmission, OPERATOR_HOLD_MS, OPERATOR_RATE_PER_S } from "../lib/api/admission.ts";
import { loadConfig } from "../lib/platform/config.ts";

setDefaultTimeout(60_000);

const db = await freshDatabase("api_operator");
const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, API_POOL_SIZE: "2", ...authEnv() } });
afterAll(async () => {
  await killAll();
  await db.drop();
});

const BUNDLE = readFileSync(createRequire(import.meta.url).resolve("swagger-ui-dist/swagger-ui-bundle.js"));

/** A GET as sent, its body as the bytes that came (no decompression by the client). */
async function get(path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; bytes: Buffer }> {
  const res = await fetch(`${api.base}${path}`, { headers, decompress: false } as RequestInit);
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

describe("the docs' assets, the document and the page", () => {
  test("the bundle: gzip when asked, the file's bytes once inflated; an ETag and a day's Cache-Control; 304 on revalidation", async () => {
    const zipped = await get("/docs/swagger-ui-bundle.js", { "accept-encoding": "gzip, deflate" });
    expect(zipped.status).toBe(200);
    expect(zipped.headers.get("content-encoding")).toBe("gzip");
    expect(zipped.bytes.length).toBeLessThan(BUNDLE.length / 2);
    expect(gunzipSync(zipped.bytes).equals(BUNDLE)).toBe(true);
    expect(zipped.headers.get("cache-control")).toBe("public, max-age=86400");
    expect(zipped.headers.get("vary")).toBe("accept-encoding");
    const etag = zipped.headers.get("etag")!;
    expect(etag).toMatch(/^W\/"[0-9a-f]+"$/);
    const plain = await get("/docs/swagger-ui-bundle.js");
    expect(plain.headers.get("content-encoding")).toBeNull();
    expect(plain.bytes.equals(BUNDLE)).toBe(true);
    expect(plain.headers.get("etag")).toBe(etag);
    const again = await get("/docs/swagger-ui-bundle.js", { "if-none-match": etag, "accept-encoding": "gzip" });
    expect(again.status).toBe(304);
    expect(again.bytes.length).toBe(0);
    expect(again.headers.get("etag")).toBe(etag);
    // gzip;q=0 refuses it; another tag is no match.
    expect((await get("/docs/swagger-ui-bundle.js", { "accept-encoding": "gzip;q=0" })).headers.get("content-encoding")).toBeNull();
    expect((await get("/docs/swagger-ui-bundle.js", { "if-none-match": 'W/"other"' })).status).toBe(200);
  });

  test.each([["/openapi.json"], ["/docs"], ["/docs/swagger-ui.css"]])("%s: gzip, an ETag, 304 on revalidation", async (path) => {
    const first = await get(path, { "accept-encoding": "gzip" });
    expect(first.status).toBe(200);
    expect(first.headers.get("content-encoding")).toBe("gzip");
    expect(gunzipSync(first.bytes).length).toBeGreaterThan(0);
    const etag = first.headers.get("etag")!;
    expect(first.headers.get("cache-control")).toBe(path.endsWith(".css") ? "public, max-age=86400" : "no-cache");
    expect((await get(path, { "if-none-match": etag })).status).toBe(304);
  });
});

test("/metrics: scrapes within API_METRICS_MAX_AGE_MS get the same text, whatever happened meanwhile", async () => {
  const first = await (await fetch(`${api.base}/metrics`)).text();
  // A request that the next render would count.
  expect((await fetch(`${api.base}/healthz`)).status).toBe(200);
  const scrapes = await Promise.all(Array.from({ length: 20 }, () => fetch(`${api.base}/metrics`).then((r) => r.text())));
  // Within the default second, or rendered again once it passed: either way one text for all.
  expect(new Set(scrapes).size).toBe(1);
  expect(first.length).toBeGreaterThan(0);
});

describe("cachedExposition", () => {
  test("one render for every scrape within the age, and for scrapes during a render; a new one after", async () => {
    let now = 0;
    let renders = 0;
    let release!: () => void;
    const render = () => {
      renders++;
      return new Promise<Response>((resolve) => (release = () => resolve(new Response(`render ${renders}\n`, { headers: { "content-type": "text/plain" } }))));
    };
    const scrape = cachedExposition(render, 1000, () => now);
    const during = Array.from({ length: 50 }, () => scrape());
    release();
    const texts = await Promise.all(during.map(async (p) => (await p).text()));
    expect(new Set(texts)).toEqual(new Set(["render 1\n"]));
    expect(renders).toBe(1);
    now += 999;
    expect(await (await scrape()).text()).toBe("render 1\n");
    now += 1;
    const next = scrape();
    release();
    const res = await next;
    expect(await res.text()).toBe("render 2\n");
    expect(res.headers.get("content-type")).toBe("text/plain");
    expect(renders).toBe(2);
  });
});

test("paceOperator: OPERATOR_RATE_PER_S answers at once, the next held OPERATOR_HOLD_MS", async () => {
  let now = 0;
  const admission = createAdmission(loadConfig({}).admission, () => now);
  const atOnce = Array.from({ length: OPERATOR_RATE_PER_S }, () => admission.paceOperator());
  expect(admission.held).toBe(0);
  await Promise.all(atOnce);
  const started = performance.now();
  const held = admission.paceOperator();
  expect(admission.held).toBe(1);
  await held;
  expect(performance.now() - started).toBeGreaterThanOrEqual(OPERATOR_HOLD_MS - 1);
  // A second later the bucket is full again.
  now += 1000;
  await admission.paceOperator();
  expect(admission.held).toBe(0);
});

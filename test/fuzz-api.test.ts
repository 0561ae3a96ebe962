// Property-based fuzzing of a real `bun api.ts` (issue 43): thousands of generated requests
// (testkit/fuzz.ts: deep nesting, long arrays, odd member names, odd unicode in keys and in
// `sub`, bad tokens, path tricks) written on raw sockets, one after another, while a probe
// asks /healthz all along. The invariants, checked on every answer and on the database:
// - no 5xx but a 503 or 429 that says when to come back (Retry-After);
// - no answer slower than ANSWER_BOUND_MS;
// - no problem (or any non-2xx, or a POST's answer) over BODY_CAP_BYTES;
// - no row in charges, refunds, outbox or idempotency_keys written behind a non-2xx, and
//   every charge or refund written with its key and its event;
// - /healthz answers 200 within HEALTHZ_BOUND_MS throughout;
// - every line the API logs is one JSON object without a token, a control, format or
//   line-separator character (a `sub` with U+2028 once reached the log raw).
// Fixed seed and count, and a time budget, so CI runs the same requests every time. Every
// violation is collected (the first few of each kind kept) and reported together at the end.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import net from "node:net";
import fc from "fast-check";
import { freshDatabase } from "../testkit/services.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { authEnv } from "../testkit/auth.ts";
import { parseRaw, type RawResponse } from "../testkit/raw-http.ts";
import { authorizationOf, fuzzRequest, type FuzzRequest } from "../testkit/fuzz.ts";

// Change the seed only with a reason: CI must send the same requests on every run.
const SEED = 20_261_203;
// 3,000 took 12 to 52 s on the shared 2-core machine with the slow bodies left out (they are
// what is red today), as its load went from light to heavy; CI's budget is ~60 s.
const RUNS = 2000;
// The whole run's budget: past it fast-check stops, and the runs not made are a violation.
const TIME_BUDGET_MS = 55_000;
// A fair answer on a loaded 2-core CI machine takes a few ms; the 8,000-bracket body of issue
// 43 took 2.7 s (10 s here). A second tells the two apart on any machine that runs the suite.
const ANSWER_BOUND_MS = 1000;
// A request that has not answered by then is counted and cut, so one freeze cannot eat the budget.
const GIVE_UP_MS = 15_000;
// "A few KiB": every problem names a few failing fields and a count of the rest.
const BODY_CAP_BYTES = 4096;
// /healthz runs no query: past half a second the event loop was held by a request.
const HEALTHZ_BOUND_MS = 500;
const HEALTHZ_EVERY_MS = 25;
// Examples kept per invariant, enough to reproduce without drowning the report.
const EXAMPLES_KEPT = 3;

setDefaultTimeout(TIME_BUDGET_MS + GIVE_UP_MS + 30_000);

const violations = new Map<string, { count: number; examples: string[] }>();
function violated(invariant: string, example: string): void {
  const entry = violations.get(invariant) ?? { count: 0, examples: [] };
  entry.count++;
  if (entry.examples.length < EXAMPLES_KEPT) entry.examples.push(example.length > 300 ? `${example.slice(0, 300)}… (${example.length} chars)` : example);
  violations.set(invariant, entry);
}

// What must never be in a log line: a JWT (its header's base64url always starts so), and the
// characters that split or disguise a line. JSON.stringify escapes C0 controls but not these.
const UNSAFE_IN_LOG = /eyJ[A-Za-z0-9_-]{10,}|[\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]/;

function checkLogLine(line: string): void {
  let parsed = false;
  try {
    parsed = typeof JSON.parse(line) === "object";
  } catch {
    // Counted below.
  }
  if (!parsed) violated("a log line that is not one JSON object", line);
  if (UNSAFE_IN_LOG.test(line)) violated("a log line holding a token or a control, format or separator character", JSON.stringify(line));
}

const db = await freshDatabase("fuzz_api");
// NODE_ENV unset, as `bun api.ts` runs for a user who sets nothing (bun test sets it to "test").
const api = await startEntrypoint("api", {
  env: { DATABASE_URL: db.url, LOG_LEVEL: "info", API_POOL_SIZE: "4", NODE_ENV: undefined, ...authEnv() },
  stdout: (line) => checkLogLine(line),
});
afterAll(async () => {
  await api.child.stop();
  await db.drop();
});

interface Counts {
  readonly charges: number;
  readonly refunds: number;
  readonly outbox: number;
  readonly keys: number;
}

async function counts(): Promise<Counts> {
  const [row] = await db.sql<Counts[]>`select (select count(*)::int from charges) as charges, (select count(*)::int from refunds) as refunds,
                                              (select count(*)::int from outbox) as outbox, (select count(*)::int from idempotency_keys) as keys`;
  return row!;
}

/** What a request was, short enough for a report line. */
function describe(r: FuzzRequest, path: string): string {
  return JSON.stringify({ method: r.method, path: path.slice(0, 80), key: r.key?.slice(0, 40), token: r.token, body: `${r.body.slice(0, 120)}${r.body.length > 120 ? `… (${r.body.length} chars)` : ""}` });
}

/** Writes the request on a socket of its own; undefined when nothing came back within GIVE_UP_MS. */
function send(head: string[], body: string): Promise<RawResponse | undefined> {
  const size = Buffer.byteLength(body);
  const text = `${head.join("\r\n")}\r\n${body || head[0]!.startsWith("POST") ? `content-length: ${size}\r\n` : ""}\r\n${body}`;
  return new Promise((resolve) => {
    const socket = net.connect(api.port, "127.0.0.1", () => socket.write(text));
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => (socket.destroy(), resolve(undefined)), GIVE_UP_MS);
    socket.on("data", (chunk) => chunks.push(Buffer.from(chunk)));
    // A server may reset a connection whose request it refused before reading it all.
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      const all = Buffer.concat(chunks).toString("utf8");
      resolve(all.includes("\r\n\r\n") ? parseRaw(all) : { status: 0, headers: {}, body: all });
    });
  });
}

let knownCharge: string = crypto.randomUUID();
let baseline: Counts = { charges: 0, refunds: 0, outbox: 0, keys: 0 };
let sent = 0;
const statuses = new Map<number, number>();

async function check(r: FuzzRequest): Promise<void> {
  const path = r.path.replaceAll("{charge}", knownCharge);
  const auth = await authorizationOf(r.token);
  const head = [`${r.method} ${path} HTTP/1.1`, "host: 127.0.0.1", "connection: close"];
  if (r.contentType !== undefined) head.push(`content-type: ${r.contentType}`);
  if (r.key !== undefined) head.push(`idempotency-key: ${r.key}`);
  if (auth !== undefined) head.push(`authorization: ${auth}`);
  const started = performance.now();
  const answer = await send(head, r.body);
  const ms = performance.now() - started;
  sent++;
  const what = describe(r, path);
  if (answer === undefined) return violated(`no answer within ${GIVE_UP_MS} ms`, what);
  const { status, headers, body } = answer;
  statuses.set(status, (statuses.get(status) ?? 0) + 1);
  const bytes = Buffer.byteLength(body);
  if (status === 0) violated("the connection closed without an HTTP answer", what);
  if (status >= 500 && !((status === 503 || status === 429) && headers["retry-after"] !== undefined)) violated(`a ${status}`, `${what} → ${body.slice(0, 200)}`);
  if (ms > ANSWER_BOUND_MS) violated(`an answer slower than ${ANSWER_BOUND_MS} ms`, `${Math.round(ms)} ms: ${what}`);
  if (bytes > BODY_CAP_BYTES && (status < 200 || status > 299 || r.method === "POST")) violated(`a body over ${BODY_CAP_BYTES} bytes`, `${status}, ${bytes} bytes: ${what}`);
  const now = await counts();
  const ok = status >= 200 && status <= 299;
  if (!ok && JSON.stringify(now) !== JSON.stringify(baseline)) violated("a row written behind a non-2xx", `${status}: ${JSON.stringify(baseline)} → ${JSON.stringify(now)}: ${what}`);
  // Without a processor every 201 writes a key, a charge or a refund, and its event, together.
  if (now.outbox !== now.charges + now.refunds || now.keys !== now.charges + now.refunds) violated("a write without its key or its event", `${status}: ${JSON.stringify(now)}: ${what}`);
  baseline = now;
  if (ok && r.method === "POST" && path === "/charges") knownCharge = (JSON.parse(body) as { id: string }).id;
}

/** Asks /healthz every HEALTHZ_EVERY_MS until stopped; returns the slowest answer and the failures. */
function probeHealth(): { stop(): Promise<{ samples: number; slowestMs: number; failures: string[] }> } {
  let running = true;
  let samples = 0;
  let slowestMs = 0;
  const failures: string[] = [];
  const loop = (async () => {
    while (running) {
      const started = performance.now();
      const status = await fetch(`${api.base}/healthz`, { signal: AbortSignal.timeout(GIVE_UP_MS) }).then(
        async (res) => (await res.arrayBuffer(), res.status),
        (error: unknown) => String(error),
      );
      const ms = performance.now() - started;
      samples++;
      slowestMs = Math.max(slowestMs, ms);
      if (status !== 200 && failures.length < EXAMPLES_KEPT) failures.push(String(status));
      await Bun.sleep(HEALTHZ_EVERY_MS);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { samples, slowestMs, failures };
    },
  };
}

test(`${RUNS} generated requests (seed ${SEED}): no 500, none slower than ${ANSWER_BOUND_MS} ms, no body over ${BODY_CAP_BYTES} bytes, no row behind a non-2xx, /healthz within ${HEALTHZ_BOUND_MS} ms`, async () => {
  baseline = await counts();
  const probe = probeHealth();
  const started = performance.now();
  await fc.assert(
    fc.asyncProperty(fuzzRequest, async (r) => {
      await check(r);
    }),
    { seed: SEED, numRuns: RUNS, interruptAfterTimeLimit: TIME_BUDGET_MS, markInterruptAsFailure: false, endOnFailure: true },
  );
  const elapsedMs = Math.round(performance.now() - started);
  const health = await probe.stop();
  if (sent < RUNS) violated(`the run did not finish within ${TIME_BUDGET_MS} ms`, `${sent} of ${RUNS} requests sent`);
  if (health.slowestMs > HEALTHZ_BOUND_MS) violated(`/healthz slower than ${HEALTHZ_BOUND_MS} ms`, `slowest ${Math.round(health.slowestMs)} ms of ${health.samples}`);
  for (const failure of health.failures) violated("/healthz not 200", failure);
  const final = await counts();
  console.log(JSON.stringify({ sent, elapsedMs, healthzSamples: health.samples, healthzSlowestMs: Math.round(health.slowestMs), rows: final, statuses: Object.fromEntries(statuses) }));
  expect(Object.fromEntries(violations)).toEqual({});
  // Some of every kind of write, or the generators drifted away from what they are for.
  expect(final.charges).toBeGreaterThan(0);
  expect(final.refunds).toBeGreaterThan(0);
  expect(health.samples).toBeGreaterThan(0);
});

// The worst bodies under the 16 KiB limit against a real `bun api.ts` (issue 43): each is sent
// ROUNDS times, one after another, while a second connection polls GET /healthz; the report
// gives each body's answer (status, bytes) and latency, /healthz's latency meanwhile, and the
// API process's RSS after each pass and its peak within it (VmHWM). A valid charge is the
// reference. Then the cost of one keyHash (HMAC-SHA256) beside the unkeyed SHA-256 prefix it
// replaced. NODE_ENV is left unset, as a user starts it.
//   bun bench/abuse-bodies.ts
import { readFileSync, writeFileSync } from "node:fs";
import { benchServices, freshDatabase, median, percentile } from "./support.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { keyHash, Secret, useKeyHashSecret } from "../lib/platform/redact.ts";
import { sha256Hex } from "../lib/platform/sha256.ts";

const ROUNDS = 50;
// The table is the last pass's; RSS is read after each, to tell growth from a first pass's warm-up.
const PASSES = 4;
// The body limit (lib/api/body.ts MAX_BODY_BYTES): every body here is under it.
const BODY_LIMIT = 16 * 1024;

const floats = (n: number) => Array.from({ length: n }, (_, i) => `${i}.5`).join(",");
const deepestArray = (depth: number, fill: string) => `${"[".repeat(depth)}${fill}${"]".repeat(depth)}`;
/** The largest body of `build(n)` under the limit. */
function largest(build: (n: number) => string): string {
  let n = 1;
  while (Buffer.byteLength(build(n * 2)) < BODY_LIMIT) n *= 2;
  for (let step = n; step >= 1; step = Math.floor(step / 2)) if (Buffer.byteLength(build(n + step)) < BODY_LIMIT) n += step;
  return build(n);
}
/** Nested 31 deep (within the limit), then as many small integers as fit: the schema's worst. */
function nestedFilled(): string {
  const head = '{"amountCents":';
  const shell = deepestArray(31, "");
  const room = BODY_LIMIT - head.length - shell.length - 1;
  const fill = Array.from({ length: Math.floor(room / 2) }, () => "0").join(",").slice(0, room);
  return `${head}${deepestArray(31, fill.replace(/,$/, ""))}}`;
}
const BODIES: ReadonlyArray<readonly [string, string]> = [
  ["valid charge (reference)", '{"amountCents":4900}'],
  ["8,000 × [ then ] (issue 43)", `{"amountCents":${deepestArray(8000, "")}}`],
  ['deepest {"a": } under 16 KiB', largest((n) => `{"amountCents":${'{"a":'.repeat(n)}1${"}".repeat(n)}}`)],
  ["2,000 floats in an array", `{"amountCents":[${floats(2000)}]}`],
  ["31 deep, then ~8,000 integers", nestedFilled()],
  ["one 16,000-character member name", `{"amountCents":1,"${"a".repeat(16_000)}":1}`],
  ["most unknown members", largest((n) => `{"amountCents":1,${Array.from({ length: n }, (_, i) => `"m${i}":0`).join(",")}}`)],
];

function memoryKiB(pid: number, field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)![1]);
}

async function timed(run: () => Promise<Response>): Promise<{ ms: number; status: number; bytes: number }> {
  const started = performance.now();
  const res = await run();
  const bytes = (await res.arrayBuffer()).byteLength;
  return { ms: performance.now() - started, status: res.status, bytes };
}

async function main(): Promise<void> {
  const services = await benchServices();
  const db = await freshDatabase("abuse");
  const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, MQTT_URL: services.mqttUrl, NODE_ENV: undefined, LOG_LEVEL: "warn", ...authEnv() } });
  const token = await tokenFor();
  const pid = api.child.pid;
  try {
    // Warm: the first requests compile the routes' checks.
    for (let i = 0; i < 20; i++) await fetch(`${api.base}/healthz`).then((r) => r.arrayBuffer());
    const rssBefore = memoryKiB(pid, "VmRSS");
    console.log(`| body | bytes | status | answer bytes | p50 ms | max ms | /healthz p50 ms | /healthz max ms |`);
    console.log(`| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`);
    const passes: { rss: number; peak: number }[] = [];
    for (let pass = 1; pass <= PASSES; pass++) {
      // "5" resets the peak (VmHWM) to the current RSS (proc(5), clear_refs): each pass's own peak.
      writeFileSync(`/proc/${pid}/clear_refs`, "5");
      for (const [name, body] of BODIES) {
        let sending = true;
        const health: number[] = [];
        const poller = (async () => {
          while (sending) health.push((await timed(() => fetch(`${api.base}/healthz`))).ms);
        })();
        const times: number[] = [];
        let last = { ms: 0, status: 0, bytes: 0 };
        for (let i = 0; i < ROUNDS; i++) {
          const headers = { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), authorization: `Bearer ${token}` };
          last = await timed(() => fetch(`${api.base}/charges`, { method: "POST", headers, body }));
          times.push(last.ms);
        }
        sending = false;
        await poller;
        const f = (v: number) => v.toFixed(1);
        if (pass === PASSES) console.log(`| ${name} | ${Buffer.byteLength(body)} | ${last.status} | ${last.bytes} | ${f(percentile(times.sort((a, b) => a - b), 50))} | ${f(Math.max(...times))} | ${f(percentile(health.sort((a, b) => a - b), 50))} | ${f(Math.max(...health))} |`);
      }
      passes.push({ rss: memoryKiB(pid, "VmRSS"), peak: memoryKiB(pid, "VmHWM") });
    }
    const mib = (kib: number) => Math.round(kib / 1024);
    console.log(`\nAPI RSS (MiB): ${mib(rssBefore)} before, then after each pass of ${ROUNDS * BODIES.length} bodies (peak within it): ${passes.map((p) => `${mib(p.rss)} (${mib(p.peak)})`).join(", ")}`);
  } finally {
    await api.child.stop();
    await db.drop();
  }
  const hash = hashCost();
  console.log(`keyHash: ${(hash.hmacNs / 1000).toFixed(2)} µs per call (HMAC-SHA256) vs ${(hash.sha256Ns / 1000).toFixed(2)} µs (the SHA-256 prefix before)`);
  // The machine is shared: its load says how far the times are from an idle one's.
  console.log(`load average at the end: ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
}

// keyHash calls timed per sample, and samples of each, alternated so a busy spell falls on both.
const HASH_CALLS = 200_000;
const HASH_SAMPLES = 9;

/** ns per call: the median of HASH_SAMPLES samples of HASH_CALLS calls, the two alternated. */
function hashCost(): { hmacNs: number; sha256Ns: number } {
  useKeyHashSecret(new Secret("bench-key-hash-secret-of-32-bytes!!"), { warn: () => {} });
  const keys = Array.from({ length: 1000 }, () => crypto.randomUUID());
  const sample = (f: (key: string) => string): number => {
    const started = performance.now();
    for (let i = 0; i < HASH_CALLS; i++) f(keys[i % keys.length]!);
    return ((performance.now() - started) * 1e6) / HASH_CALLS;
  };
  const hmac: number[] = [];
  const sha: number[] = [];
  for (let s = 0; s < HASH_SAMPLES; s++) {
    hmac.push(sample(keyHash));
    sha.push(sample((key) => sha256Hex(key).slice(0, 12)));
  }
  return { hmacNs: median(hmac), sha256Ns: median(sha) };
}

await main();

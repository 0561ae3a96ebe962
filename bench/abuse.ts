// Hostile bodies against a real `bun api.ts` (issue 43): for each of the worst bodies an
// attacker with a valid token can build under the 16 KiB limit, the answer's status, time and
// size, /healthz's slowest answer meanwhile (asked every HEALTHZ_EVERY_MS), and the API
// process's RSS before and its peak after (VmHWM). A valid charge is the reference. Also the
// cost of one keyHash (HMAC-SHA256) beside the unkeyed SHA-256 it replaced.
// `DATABASE_URL=… bun bench/abuse.ts [tries=3]`, with NODE_ENV unset as users run `bun api.ts`
// (the API inherits the bench's environment).
import { readFileSync, writeFileSync } from "node:fs";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { benchServices, freshDatabase, log, median, startProcess } from "./support.ts";
import { keyHash, Secret, useKeyHashSecret } from "../lib/shared/redact.ts";
import { sha256Hex } from "../lib/shared/sha256.ts";

// The body limit (lib/api/body.ts MAX_BODY_BYTES): every body here is under it.
const BODY_LIMIT = 16 * 1024;
// Often enough to see a stall of a few ms, rarely enough not to be the load.
const HEALTHZ_EVERY_MS = 5;
// keyHash calls timed per sample.
const HASH_CALLS = 200_000;

const tries = Number(process.argv[2] ?? 3);

/** The largest body of `build(n)` under the limit. */
function largest(build: (n: number) => string): string {
  let n = 1;
  while (Buffer.byteLength(build(n * 2)) < BODY_LIMIT) n *= 2;
  let step = n;
  while (step >= 1) {
    if (Buffer.byteLength(build(n + step)) < BODY_LIMIT) n += step;
    step = Math.floor(step / 2);
  }
  return build(n);
}

const BODIES: Record<string, string> = {
  "valid charge (reference)": '{"amountCents":4900}',
  "issue 43: 8,000 × [ then ]": `{"amountCents":${"[".repeat(8000)}${"]".repeat(8000)}}`,
  "deepest [ ] under 16 KiB": largest((n) => `{"amountCents":${"[".repeat(n)}${"]".repeat(n)}}`),
  "deepest {\"a\": } under 16 KiB": largest((n) => `{"amountCents":${'{"a":'.repeat(n)}1${"}".repeat(n)}}`),
  "most floats in amountCents": largest((n) => `{"amountCents":[${Array.from({ length: n }, (_, i) => `${i}.5`).join(",")}]}`),
  "most unknown members": largest((n) => `{"amountCents":1,${Array.from({ length: n }, (_, i) => `"${i.toString(36)}":0`).join(",")}}`),
};

function rssKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(`${field}:`));
  return Number(line?.match(/\d+/)?.[0] ?? NaN);
}

interface Row {
  readonly body: string;
  readonly bytes: number;
  readonly status: number;
  readonly answerBytes: number;
  readonly medianMs: number;
  readonly maxMs: number;
  readonly healthzMaxMs: number;
  readonly rssBeforeMb: number;
  readonly rssPeakMb: number;
}

async function main(): Promise<void> {
  await benchServices();
  const db = await freshDatabase("abuse");
  const api = await startProcess("api", db, { ...authEnv(), LOG_LEVEL: "warn" });
  const headers = { "content-type": "application/json", ...(await authHeaders()) };
  const rows: Row[] = [];
  try {
    for (const [name, body] of Object.entries(BODIES)) {
      // "5" resets the peak (VmHWM) to the current RSS (proc(5), clear_refs): each body's own peak.
      writeFileSync(`/proc/${api.child.pid}/clear_refs`, "5");
      const rssBeforeMb = rssKb(api.child.pid, "VmRSS") / 1024;
      const times: number[] = [];
      let healthzMaxMs = 0;
      let status = 0;
      let answerBytes = 0;
      for (let i = 0; i < tries; i++) {
        let probing = true;
        const probe = (async () => {
          while (probing) {
            const t = performance.now();
            await fetch(`${api.base}/healthz`).then((r) => r.arrayBuffer());
            healthzMaxMs = Math.max(healthzMaxMs, performance.now() - t);
            await Bun.sleep(HEALTHZ_EVERY_MS);
          }
        })();
        await Bun.sleep(HEALTHZ_EVERY_MS * 2);
        const started = performance.now();
        const res = await fetch(`${api.base}/charges`, { method: "POST", headers: { ...headers, "idempotency-key": crypto.randomUUID() }, body });
        answerBytes = (await res.arrayBuffer()).byteLength;
        times.push(performance.now() - started);
        status = res.status;
        probing = false;
        await probe;
      }
      const row = { body: name, bytes: Buffer.byteLength(body), status, answerBytes, medianMs: median(times), maxMs: Math.max(...times), healthzMaxMs, rssBeforeMb, rssPeakMb: rssKb(api.child.pid, "VmHWM") / 1024 };
      rows.push(row);
      log(`${name}: ${row.bytes} B → ${status}, ${answerBytes} B, median ${row.medianMs.toFixed(1)} ms (max ${row.maxMs.toFixed(1)}), /healthz max ${healthzMaxMs.toFixed(1)} ms, RSS ${rssBeforeMb.toFixed(0)} MB → peak ${row.rssPeakMb.toFixed(0)} MB`);
    }
  } finally {
    await api.child.stop();
    await db.drop();
  }
  const hash = hashCost();
  log(`keyHash: ${hash.hmacNs.toFixed(0)} ns per call (HMAC-SHA256) vs ${hash.sha256Ns.toFixed(0)} ns (the SHA-256 before)`);
  // The machine is shared: its load says how far the times are from an idle one's.
  const loadAverage = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  log(`load average at the end: ${loadAverage}`);
  console.log(JSON.stringify({ tries, loadAverage, rows, keyHash: hash }));
}

// Alternated samples of each, so a busy spell of the machine falls on both.
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

// The worst bodies under the 16 KiB limit against a real `bun api.ts` (issue 43): each is sent
// ROUNDS times, one after another, while a second connection polls GET /healthz; the report
// gives each body's answer (status, bytes) and latency, /healthz's latency meanwhile, and the
// API process's RSS before and after. NODE_ENV is left unset, as a user starts it.
//   bun bench/abuse-bodies.ts
import { readFileSync } from "node:fs";
import { benchServices, freshDatabase, percentile } from "./support.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";

const ROUNDS = 50;
// The table is the last pass's; RSS is read after each, to tell growth from a first pass's warm-up.
const PASSES = 4;
const BODY_LIMIT = 16 * 1024;

const floats = (n: number) => Array.from({ length: n }, (_, i) => `${i}.5`).join(",");
const deepestArray = (depth: number, fill: string) => `${"[".repeat(depth)}${fill}${"]".repeat(depth)}`;
/** Nested 31 deep (within the limit), then as many small integers as fit: the schema's worst. */
function nestedFilled(): string {
  const head = '{"amountCents":';
  const shell = deepestArray(31, "");
  const room = BODY_LIMIT - head.length - shell.length - 1;
  const fill = Array.from({ length: Math.floor(room / 2) }, () => "0").join(",").slice(0, room);
  return `${head}${deepestArray(31, fill.replace(/,$/, ""))}}`;
}
const BODIES: ReadonlyArray<readonly [string, string]> = [
  ["8,000 × [ then ] (issue 43)", `{"amountCents":${deepestArray(8000, "")}}`],
  ["2,000 floats in an array", `{"amountCents":[${floats(2000)}]}`.slice(0, BODY_LIMIT)],
  ["31 deep, then ~8,000 integers", nestedFilled()],
  ["one 16,000-character member name", `{"amountCents":1,"${"a".repeat(16_000)}":1}`],
  ["1,500 unknown members", `{"amountCents":1,${Array.from({ length: 1500 }, (_, i) => `"m${i}":0`).join(",")}}`.slice(0, BODY_LIMIT - 1) + "}"],
];

function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]);
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
  try {
    // Warm: the first requests compile the routes' checks.
    for (let i = 0; i < 20; i++) await fetch(`${api.base}/healthz`).then((r) => r.arrayBuffer());
    const rssBefore = rssKiB(api.child.pid);
    console.log(`| body | bytes | status | answer bytes | p50 ms | max ms | /healthz p50 ms | /healthz max ms |`);
    console.log(`| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`);
    const rssAfterPass: number[] = [];
    for (let pass = 1; pass <= PASSES; pass++) {
    for (const [name, body] of BODIES) {
      let sending = true;
      const health: number[] = [];
      const poller = (async () => {
        while (sending) health.push((await timed(() => fetch(`${api.base}/healthz`))).ms);
      })();
      const times: number[] = [];
      let last = { status: 0, bytes: 0 };
      for (let i = 0; i < ROUNDS; i++) {
        const r = await timed(() =>
          fetch(`${api.base}/charges`, {
            method: "POST",
            headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), authorization: `Bearer ${token}` },
            body,
          }),
        );
        times.push(r.ms);
        last = r;
      }
      sending = false;
      await poller;
      const f = (v: number) => v.toFixed(1);
      if (pass === PASSES) console.log(`| ${name} | ${body.length} | ${last.status} | ${last.bytes} | ${f(percentile(times.sort((a, b) => a - b), 50))} | ${f(Math.max(...times))} | ${f(percentile(health.sort((a, b) => a - b), 50))} | ${f(Math.max(...health))} |`);
    }
    rssAfterPass.push(rssKiB(api.child.pid));
    }
    const mib = (kib: number) => Math.round(kib / 1024);
    console.log(`\nAPI RSS (MiB): ${mib(rssBefore)} before, then after each pass of ${ROUNDS * BODIES.length} bad bodies: ${rssAfterPass.map(mib).join(", ")}`);
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

await main();

// `bun bench/worker-bench.ts`: what one request costs on the edge worker (worker.ts on workerd,
// and under deno serve) beside the long-lived server (bun api.ts, one pool), one request at a
// time so each figure is a latency, not a throughput: GET /healthz (the runtime and the app, no
// database), POST /charges with a new key (connect + auth + statement on the worker, auth +
// statement on the server), and commit → subscriber through the real relay (the worker wakes it
// with a notify after each response). Also, in this process: a fresh connection's
// connect + `select 1`, and one HS256 verification. Prints a table; the figures go in bench/README.md.
import { CHARGE_CREATED } from "../lib/charges/events.ts";
import { createSql } from "../lib/platform/db.ts";
import { createAuthenticator } from "../lib/api/auth.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { freePort } from "../dev/ports.ts";
import { planWorkerd } from "../dev/workerd.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { collect } from "../testkit/mqtt.ts";
import { killAll, spawnChild, startEntrypoint, waitForHttp, type Child } from "../testkit/processes.ts";
import { processServices } from "../testkit/services.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";

const REQUESTS = Number(process.env.WORKER_BENCH_REQUESTS ?? 200);
const WARMUP = 20;

const pct = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const fmt = (values: number[]): string => `p50 ${pct(values, 50).toFixed(2)} ms, p99 ${pct(values, 99).toFixed(2)} ms`;

async function timed(n: number, run: () => Promise<void>): Promise<number[]> {
  for (let i = 0; i < WARMUP; i++) await run();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await run();
    out.push(performance.now() - t);
  }
  return out;
}

async function main(): Promise<void> {
  const { adminDatabaseUrl, mqttUrl } = await processServices("the worker bench");
  const db = await createScratchDatabase(adminDatabaseUrl, scratchName("bench", "worker"));
  const prefix = `worker-bench-${crypto.randomUUID().slice(0, 8)}/`;
  const collector = await collect(mqttUrl, prefix);
  const env = { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn", ...authEnv() };
  const rows: [string, string][] = [];
  try {
    await startEntrypoint("relay", { env: { ...env, RELAY_PORT: undefined } });
    const auth = { authorization: `Bearer ${await tokenFor()}` };
    const connect = await timed(REQUESTS, async () => {
      const sql = createSql(db.url, { max: 1, singleUse: true });
      await sql`select 1`;
      await sql.end();
    });
    rows.push(["fresh connection: connect + select 1 (Bun, in process)", fmt(connect)]);
    const authenticator = createAuthenticator(loadConfig({ ...env }).auth);
    const verify = await timed(REQUESTS, async () => void (await authenticator.authenticate(auth.authorization)));
    rows.push(["HS256 verification (jose, in process)", fmt(verify)]);
    for (const target of ["bun api.ts", "workerd worker.ts", "deno serve worker.ts"] as const) {
      const { child, base } = await start(target, env);
      const health = await timed(REQUESTS, async () => void (await (await fetch(`${base}/healthz`)).text()));
      const ids: string[] = [];
      const charge = await timed(REQUESTS, async () => {
        const res = await fetch(`${base}/charges`, {
          method: "POST",
          headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...auth },
          body: '{"amountCents":100}',
        });
        ids.push(((await res.json()) as { id: string }).id);
      });
      await collector.barrier(30_000);
      const arrivals = collector.firstArrivals();
      const latencies = [...arrivals.values()]
        .filter((m) => m.envelope?.type === CHARGE_CREATED && ids.includes((m.envelope.data as { chargeId: string }).chargeId))
        .map((m) => performance.timeOrigin + m.at - Date.parse(m.envelope!.createdAt));
      rows.push([`${target}: GET /healthz`, fmt(health)]);
      rows.push([`${target}: POST /charges (new key)`, fmt(charge)]);
      rows.push([`${target}: commit → subscriber (${latencies.length} events)`, fmt(latencies)]);
      collector.messages.length = 0;
      await child.stop();
    }
  } finally {
    await killAll();
    await collector.close().catch(() => {});
    await db.drop().catch(() => {});
  }
  console.log(`\n${REQUESTS} sequential requests each (after ${WARMUP} warm-up)\n`);
  for (const [name, value] of rows) console.log(`| ${name} | ${value} |`);
}

async function start(target: string, env: Record<string, string>): Promise<{ child: Child; base: string }> {
  const port = await freePort();
  let child: Child;
  if (target === "bun api.ts") child = spawnChild(["bun", "api.ts"], { env: { ...env, PORT: String(port) } });
  else if (target === "workerd worker.ts") {
    const plan = await planWorkerd(port, env, "127.0.0.1");
    child = spawnChild(plan.cmd, { env: plan.env });
    void child.done.then(plan.cleanup);
  } else child = spawnChild(["deno", "serve", "-A", "--host", "127.0.0.1", "--port", String(port), "worker.ts"], { env });
  const base = `http://127.0.0.1:${port}`;
  await waitForHttp(child, `${base}/readyz`, 60_000);
  return { child, base };
}

await main().catch(async (error: unknown) => {
  console.error(`worker bench: FAILED: ${error instanceof Error ? error.message : String(error)}`);
  await killAll();
  process.exit(1);
});
process.exit(0);

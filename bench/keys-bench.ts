// #40 items 1-3, measured on `bun api.ts` (figures go to bench/README.md):
//  - state: GET /charges/idempotency-key's p50/p99 while wrk drives the ledger's POST /charges
//    (32 connections), against the same lookup on a quiet API;
//  - wait: the "same key while its processor call runs" case (simulator latency per call), the
//    client's tries and the intent's total time with Prefer: wait and with it stripped;
//  - bytes: a tombstone's row against the full key row it replaces (pg_column_size).
//   bun bench/keys-bench.ts [seconds=10] [rounds=5]
import { ChargesClient } from "../client/index.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { chargeWith, processorEnv } from "../testkit/processor.ts";
import { startProcessorSim } from "../testkit/processor-sim.ts";
import { killAll } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { createdAndLatency, wrk } from "./api-bench.ts";
import { freshDatabase, latencyOf, log, startProcess } from "./support.ts";

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 5);
// The ledger's usual load (bench/README.md row 2).
const LEDGER_CONNECTIONS = 32;
// Each processor call answered after this long: a charge's create and confirm take twice it.
const CALL_LATENCY_MS = 1000;

async function lookups(port: number, key: string, token: string, untilMs: number): Promise<number[]> {
  const samples: number[] = [];
  while (performance.now() < untilMs) {
    const started = performance.now();
    const res = await fetch(`http://127.0.0.1:${port}/charges/idempotency-key`, { headers: { "idempotency-key": key, authorization: `Bearer ${token}` } });
    if (res.status !== 200) throw new Error(`lookup answered ${res.status}`);
    await res.arrayBuffer();
    samples.push(performance.now() - started);
  }
  return samples.sort((a, b) => a - b);
}

async function stateUnderLoad(): Promise<void> {
  const db = await freshDatabase("keys_state");
  const api = await startProcess("api", db, authEnv());
  const token = await tokenFor();
  const key = `bench-${crypto.randomUUID()}`;
  await fetch(`http://127.0.0.1:${api.port}/charges`, { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key, authorization: `Bearer ${token}` }, body: '{"amountCents":100}' });
  const quiet = latencyOf(await lookups(api.port, key, token, performance.now() + seconds * 1000));
  const [load, busy] = await Promise.all([wrk(api.port, LEDGER_CONNECTIONS, seconds, undefined, token), lookups(api.port, key, token, performance.now() + seconds * 1000)]);
  const [plan] = await db.sql<{ "QUERY PLAN": string }[]>`explain select endpoint from idempotency_keys where tenant = 'tenant-a' and key = ${key}`;
  log(`state: quiet ${JSON.stringify(quiet)}; under ${LEDGER_CONNECTIONS}-connection ledger load (${createdAndLatency(load).createdPerSec.toFixed(0)} created/s) ${JSON.stringify(latencyOf(busy))}; plan: ${plan!["QUERY PLAN"]}`);
  await tombstoneBytes(db.sql);
  await killAll();
  await db.drop();
}

async function tombstoneBytes(sql: Awaited<ReturnType<typeof freshDatabase>>["sql"]): Promise<void> {
  const [full] = await sql<{ bytes: number }[]>`select avg(pg_column_size(k.*))::int as bytes from idempotency_keys k where status = 'COMPLETED'`;
  await sql`update idempotency_keys set expires_at = now() - interval '1 second' where status = 'COMPLETED'`;
  const { runJob, newGauges } = await import("../lib/ops/jobs.ts");
  const { loadConfig } = await import("../lib/platform/config.ts");
  const { silentLogger } = await import("../lib/platform/log.ts");
  let tombstoned = 0;
  for (;;) {
    const r = (await runJob("key-retention", sql, loadConfig({ DATABASE_URL: "postgres://unused" }), newGauges(), silentLogger)) as { tombstoned?: number };
    tombstoned += r.tombstoned ?? 0;
    if ((r.tombstoned ?? 0) === 0) break;
  }
  const [tomb] = await sql<{ bytes: number }[]>`select avg(pg_column_size(k.*))::int as bytes from idempotency_keys k where status = 'EXPIRED'`;
  log(`bytes: full key row ${full!.bytes} B, tombstone ${tomb!.bytes} B (${tombstoned} keys; heap tuple, the index entries are the same)`);
}

async function waitCase(): Promise<void> {
  const db = await freshDatabase("keys_wait");
  const sim = await startProcessorSim();
  const api = await startProcess("api", db, { ...authEnv(), ...processorEnv(sim, 5000) });
  const base = `http://127.0.0.1:${api.port}`;
  const results: Record<string, { tries: number[]; ms: number[] }> = { wait: { tries: [], ms: [] }, strip: { tries: [], ms: [] } };
  sim.setFaults({ latencyMs: CALL_LATENCY_MS });
  for (let round = 0; round < rounds; round++) {
    for (const mode of ["wait", "strip"] as const) {
      const key = `bench-${crypto.randomUUID()}`;
      const started = performance.now();
      const holder = new ChargesClient({ baseUrl: base, token: () => tokenFor() });
      const first = holder.charges.create(JSON.parse(chargeWith(100)), { idempotencyKey: key });
      await waitUntil(async () => (await db.sql`select 1 from idempotency_keys where key = ${key}`).length === 1, 10_000, "the key STARTED");
      let tries = 0;
      const fetcher = (url: string, init: RequestInit): Promise<Response> => {
        const headers = new Headers(init.headers);
        if (mode === "strip") headers.delete("prefer");
        return fetch(url, { ...init, headers });
      };
      const second = new ChargesClient({ baseUrl: base, token: () => tokenFor(), fetch: fetcher, onTry: () => tries++ });
      await second.charges.create(JSON.parse(chargeWith(100)), { idempotencyKey: key });
      results[mode]!.ms.push(performance.now() - started);
      results[mode]!.tries.push(tries);
      await first;
    }
  }
  log(`wait (${CALL_LATENCY_MS} ms per processor call, ${rounds} rounds): ${JSON.stringify(results)}`);
  await killAll();
  await sim.stop();
  await db.drop();
}

if (import.meta.main) {
  await stateUnderLoad();
  await waitCase();
  process.exit(0);
}

// Ad-hoc: where the CPU goes with the API under wrk, with and without the relay.
import { readFileSync } from "node:fs";
import { startStack, stopStack, CONNECTIONS, DRAIN_TIMEOUT_MS } from "./relay-live.ts";
import { wrk, answered, WARM_UP_SECONDS } from "./api-bench.ts";
import { untilDrained } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";
import postgres from "postgres";

const ticks = (pid: number): number => {
  try {
    const t = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = t.slice(t.lastIndexOf(")") + 2).split(" ");
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
};
const admin = postgres(process.env.DATABASE_URL!, { max: 1 });
async function groups(db: string): Promise<Record<string, number[]>> {
  const rows = await admin<{ pid: number; app: string; type: string; datname: string | null }[]>`select pid, application_name as app, backend_type as type, datname from pg_stat_activity`;
  const g: Record<string, number[]> = { apiPg: [], relayPg: [], pgAux: [] };
  for (const r of rows) {
    if (r.datname === db && r.app === "charges-api") g.apiPg!.push(r.pid);
    else if (r.datname === db && r.app === "charges-relay") g.relayPg!.push(r.pid);
    else if (r.type !== "client backend") g.pgAux!.push(r.pid);
  }
  return g;
}
const mosq = Number(Bun.spawnSync(["pgrep", "-o", "mosquitto"]).stdout.toString().trim());
const token = await tokenFor();
const seconds = Number(process.argv[2] ?? 10);
for (const withRelay of [false, true, false, true]) {
  const s = await startStack(withRelay, undefined);
  try {
    if (process.env.FF) await s.db.sql.unsafe(`alter table outbox set (fillfactor = ${Number(process.env.FF)})`);
    await wrk(s.api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
    if (withRelay) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
    const g = await groups(s.db.name);
    const procs: Record<string, number[]> = { api: [s.api.child.pid], relay: s.relay ? [s.relay.service.child.pid] : [], mosquitto: [mosq], ...g };
    const before = Object.fromEntries(Object.entries(procs).map(([k, ps]) => [k, ps.reduce((n, p) => n + ticks(p), 0)]));
    const run = await wrk(s.api.port, CONNECTIONS, seconds, undefined, token);
    if (withRelay) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
    const created = answered(run, 201);
    const g2 = await groups(s.db.name);
    for (const k of ["apiPg", "relayPg"] as const) for (const p of g2[k]!) if (!procs[k]!.includes(p)) procs[k]!.push(p);
    const out = Object.entries(procs).map(([k, ps]) => `${k} ${(((ps.reduce((n, p) => n + ticks(p), 0) - (before[k] ?? 0)) * 1e4) / created).toFixed(0)}`);
    console.log(`${withRelay ? "relay" : "alone"}: ${(created / seconds).toFixed(0)}/s; µs per charge: ${out.join(", ")}`);
  } finally {
    await stopStack(s);
  }
}
await admin.end();

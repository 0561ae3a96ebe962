// Where the CPU goes per charge with the API under wrk at its full rate, alone and with the
// relay publishing beside it (relay-live.ts stacks): the API process, its Postgres backends,
// the relay process, its backends, Postgres's own processes and the broker, from /proc, each
// stack fresh, alternated. The relay's share is what it costs the API on a shared machine.
//   bun bench/beside-cpu.ts [pairs=2] [seconds=8]
import { readFileSync } from "node:fs";
import { CONNECTIONS, DRAIN_TIMEOUT_MS, startStack, stopStack, type Stack } from "./relay-live.ts";
import { answered, wrk, WARM_UP_SECONDS } from "./api-bench.ts";
import { loadAverage } from "./drain-pairs.ts";
import { log, untilDrained } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";
import { RELAY_APP, runToExit } from "../testkit/processes.ts";

// USER_HZ, as bench/cpu.ts reads it: 100 on every mainstream Linux build.
const US_PER_TICK = 10_000;
const API_APP = "charges-api";

function ticksOf(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const text = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // Gone meanwhile: its ticks are lost with it.
    }
  }
  return ticks;
}

type Groups = Record<"api" | "relay" | "broker" | "apiPostgres" | "relayPostgres" | "postgresOwn", number[]>;

async function groupsOf(s: Stack, broker: number[]): Promise<Groups> {
  const rows = await s.db.sql<{ pid: number; app: string; type: string; datname: string | null }[]>`
    select pid, application_name as app, backend_type as type, datname from pg_stat_activity`;
  const mine = (app: string): number[] => rows.filter((r) => r.datname === s.db.name && r.app === app).map((r) => r.pid);
  return {
    api: [s.api.child.pid],
    relay: s.relay ? [s.relay.service.child.pid] : [],
    broker,
    apiPostgres: mine(API_APP),
    relayPostgres: mine(RELAY_APP),
    postgresOwn: rows.filter((r) => r.type !== "client backend").map((r) => r.pid),
  };
}

async function measure(withRelay: boolean, seconds: number, token: string, broker: number[]): Promise<void> {
  const s = await startStack(withRelay, undefined);
  try {
    await wrk(s.api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
    if (withRelay) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
    const load = loadAverage();
    const groups = await groupsOf(s, broker);
    const before = Object.fromEntries(Object.entries(groups).map(([k, pids]) => [k, ticksOf(pids)]));
    const run = await wrk(s.api.port, CONNECTIONS, seconds, undefined, token);
    if (withRelay) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
    const created = answered(run, 201);
    // Backends opened during the run count from their start.
    const after = await groupsOf(s, broker);
    const spent = Object.entries(after).map(([k, pids]) => `${k} ${(((ticksOf(pids) - (before[k] ?? 0)) * US_PER_TICK) / created).toFixed(0)}`);
    log(`${withRelay ? "with the relay" : "alone"} (load ${load}): ${(created / seconds).toFixed(0)} created/s; µs per charge: ${spent.join(", ")}`);
  } finally {
    await stopStack(s);
  }
}

const [pairs, seconds] = [Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 8)];
const broker = (await runToExit(["pgrep", "-x", "mosquitto"]).catch(() => ({ stdout: "" }))).stdout.split("\n").filter(Boolean).map(Number);
const token = await tokenFor();
for (let i = 0; i < pairs; i++) for (const withRelay of [false, true]) await measure(withRelay, seconds, token, broker);

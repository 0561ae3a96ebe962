// The relay's cost per row, measured: CPU time (utime + stime from /proc) of the `bun relay.ts`
// processes and of the Postgres backends serving them (application_name charges-relay), taken
// before and after a drain of N rows, with 1 or more relays on one database. Also prints the
// drain rate (support.ts drainRate: from the rows' first claim to the end of the drain) and,
// for comparison, the CPU of every postgres process over the same span (an upper bound: it
// includes other clients and the WAL writer, checkpointer and autovacuum).
//   bun bench/relay-cost.ts [rows=50000] [relays=1] [--cpu-prof <dir>]
// With --cpu-prof the relays run under `bun --cpu-prof` and write their profiles to <dir>.
import { readdirSync, readFileSync } from "node:fs";
import { freePort } from "../dev/ports.ts";
import type { Sql } from "../lib/platform/db.ts";
import { insertPending } from "../testkit/outbox.ts";
import { RELAY_APP, spawnChild, waitForHttp, type Child } from "../testkit/processes.ts";
import { benchServices, drainRate, freshDatabase, untilDrained, type FreshDb } from "./support.ts";

// Bounds a stuck drain; a healthy one of the default backlog takes seconds.
const DRAIN_TIMEOUT_MS = 600_000;
// Linux reports utime/stime in clock ticks; USER_HZ is 100 on every mainstream kernel.
const TICKS_PER_SECOND = 100;

export interface RelayCost {
  readonly relays: number;
  readonly rows: number;
  readonly rowsPerSec: number;
  /** CPU µs per row in the relay processes. */
  readonly relayUsPerRow: number;
  /** CPU µs per row in the Postgres backends of the relays' connections. */
  readonly postgresUsPerRow: number;
  /** CPU µs per row over every postgres process (includes other clients and background work). */
  readonly allPostgresUsPerRow: number;
}

/** utime + stime of a process in seconds; 0 when it is gone. */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces), counted from field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

function postgresPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === "postgres") pids.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

async function relayBackends(sql: Sql, database: string): Promise<number[]> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity where application_name = ${RELAY_APP} and datname = ${database}`;
  return rows.map((r) => r.pid);
}

const sum = (pids: readonly number[]): number => pids.reduce((total, pid) => total + cpuSeconds(pid), 0);

async function startRelays(db: FreshDb, count: number, prefix: string, profileDir: string | undefined, cwd: string | undefined): Promise<Child[]> {
  const { mqttUrl } = await benchServices();
  return Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const port = await freePort();
      const cmd = profileDir ? ["bun", "--cpu-prof", "--cpu-prof-dir", profileDir, "relay.ts"] : ["bun", "relay.ts"];
      const child = spawnChild(cmd, {
        name: `relay ${i + 1}`,
        cwd,
        env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, RELAY_PORT: String(port), MQTT_TOPIC_PREFIX: prefix },
      });
      await waitForHttp(child, `http://127.0.0.1:${port}/readyz`);
      return child;
    }),
  );
}

/**
 * Starts the relays on an empty outbox, then commits `rows` pending rows in one transaction
 * and measures the CPU spent until they are all published. The pool's connections open
 * during the drain; their backends' CPU is counted from their start. `cwd`: another checkout's
 * relay (relay-baseline.ts checkoutOf), on the schema of this one.
 */
export async function relayCost(rows: number, relays = 1, profileDir?: string, cwd?: string): Promise<RelayCost> {
  const db = await freshDatabase("cost", 4);
  const relayChildren = await startRelays(db, relays, `bench/${db.name}/`, profileDir, cwd);
  try {
    const pgPids = postgresPids();
    const backendsBefore = await relayBackends(db.sql, db.name);
    const backendCpuBefore = new Map(backendsBefore.map((pid) => [pid, cpuSeconds(pid)]));
    const before = { relay: sum(relayChildren.map((c) => c.pid)), all: sum(pgPids) };
    const ids = (await insertPending(db.sql, rows)).map((row) => row.id);
    const drainedAt = await untilDrained(db.sql, DRAIN_TIMEOUT_MS);
    const backends = await relayBackends(db.sql, db.name);
    // A backend that was there before counts only its CPU since; a new one from its start.
    const backendCpu = backends.reduce((total, pid) => total + cpuSeconds(pid) - (backendCpuBefore.get(pid) ?? 0), 0);
    const after = { relay: sum(relayChildren.map((c) => c.pid)), all: sum(postgresPids()) };
    const { rowsPerSec } = await drainRate(db.sql, ids, drainedAt);
    const us = (seconds: number): number => (seconds * 1e6) / rows;
    return {
      relays,
      rows,
      rowsPerSec,
      relayUsPerRow: us(after.relay - before.relay),
      postgresUsPerRow: us(backendCpu),
      allPostgresUsPerRow: us(after.all - before.all),
    };
  } finally {
    await Promise.all(relayChildren.map((c) => c.stop()));
    await db.drop();
  }
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const profileAt = args.indexOf("--cpu-prof");
  const profileDir = profileAt >= 0 ? args.splice(profileAt, 2)[1] : undefined;
  const rows = Number(args[0] ?? 50_000);
  const relays = Number(args[1] ?? 1);
  const cost = await relayCost(rows, relays, profileDir);
  console.log(
    `${cost.relays} relay(s), ${cost.rows} rows: ${Math.round(cost.rowsPerSec)} rows/s; CPU per row: relay ${cost.relayUsPerRow.toFixed(1)} µs, ` +
      `its Postgres backends ${cost.postgresUsPerRow.toFixed(1)} µs (every postgres process: ${cost.allPostgresUsPerRow.toFixed(1)} µs)`,
  );
}

// CPU time measured, not estimated: utime + stime from /proc/<pid>/stat of the process under
// test and of the Postgres processes that serve it, read before and after a fixed run.
// Linux only, and only when Postgres runs on this machine; otherwise the figures are null.
import { readFileSync } from "node:fs";
import type { Sql } from "../lib/platform/db.ts";
import { runToExit } from "../testkit/processes.ts";

// USER_HZ: the unit of utime and stime; 100 on every mainstream Linux build.
const DEFAULT_CLOCK_TICKS = 100;
let ticksPerSecond: number | undefined;

async function clockTicks(): Promise<number> {
  if (ticksPerSecond === undefined) {
    const out = await runToExit(["getconf", "CLK_TCK"]).catch(() => undefined);
    const value = Number(out?.stdout.trim());
    ticksPerSecond = Number.isFinite(value) && value > 0 ? value : DEFAULT_CLOCK_TICKS;
  }
  return ticksPerSecond;
}

/** utime + stime of `pid` in clock ticks, with its start time to tell a reused pid apart; undefined when gone. */
function readStat(pid: number): { ticks: number; started: string; name: string } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name may hold spaces and parentheses: fields are counted after its last ')'.
  const close = text.lastIndexOf(")");
  const name = text.slice(text.indexOf("(") + 1, close);
  const fields = text.slice(close + 2).split(" ");
  // After the name: state is field 3, so utime (14), stime (15), starttime (22) sit at 11, 12, 19.
  return { ticks: Number(fields[11]) + Number(fields[12]), started: fields[19] ?? "", name };
}

type Snapshot = Map<number, { ticks: number; started: string }>;

/** Only processes named postgres: a pid of a server on another machine may name anything here. */
function snapshot(pids: readonly number[]): Snapshot {
  const out: Snapshot = new Map();
  for (const pid of pids) {
    const stat = readStat(pid);
    if (stat?.name === "postgres") out.set(pid, stat);
  }
  return out;
}

/** Ticks spent between two snapshots; a pid born in between counts from zero. */
function spent(before: Snapshot, after: Snapshot): number {
  let ticks = 0;
  for (const [pid, end] of after) {
    const start = before.get(pid);
    ticks += start && start.started === end.started ? end.ticks - start.ticks : end.ticks;
  }
  return ticks;
}

/**
 * The Postgres processes that serve `appName`'s connections, plus the server's own
 * (WAL writer, checkpointer, background writer, autovacuum): the commit flushes and page
 * writes a workload causes land there too. Other clients of a shared server add to the
 * latter, so measure on a quiet server.
 */
async function postgresPids(sql: Sql, appName: string): Promise<number[]> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity
     where application_name = ${appName} or backend_type <> 'client backend'`;
  return rows.map((r) => r.pid);
}

export interface CpuSample {
  /** Ends the measurement: call it right after the run, while the connections are still open. */
  stop(): Promise<CpuCost>;
}

export interface CpuCost {
  /** CPU seconds of the process under test (null: not measured, e.g. pgbench's client). */
  readonly processS: number | null;
  /** CPU seconds of the Postgres processes serving it (null: Postgres is not on this machine). */
  readonly postgresS: number | null;
}

/** Starts measuring `pids` (the processes under test; none for pgbench) and `appName`'s Postgres backends; `admin` is any connection to the server. */
export async function sampleCpu(admin: Sql, appName: string, pids: readonly number[]): Promise<CpuSample> {
  const hz = await clockTicks();
  const pgBefore = snapshot(await postgresPids(admin, appName));
  const ownBefore = pids.map(readStat);
  return {
    async stop() {
      const ownAfter = pids.map(readStat);
      const pgAfter = snapshot(await postgresPids(admin, appName));
      let own: number | null = pids.length > 0 ? 0 : null;
      pids.forEach((_, i) => {
        const [start, end] = [ownBefore[i], ownAfter[i]];
        own = own === null || !start || !end ? null : own + end.ticks - start.ticks;
      });
      return {
        processS: own === null ? null : own / hz,
        postgresS: pgAfter.size > 0 ? spent(pgBefore, pgAfter) / hz : null,
      };
    },
  };
}

/** µs of CPU per unit of work, or null. */
export function microsPer(seconds: number | null, count: number): number | null {
  return seconds === null || count <= 0 ? null : (seconds * 1e6) / count;
}

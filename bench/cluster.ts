// A Postgres cluster of the bench's own (testkit/private-postgres.ts: the embedded Postgres in a
// temp folder, its defaults: fsync on, autovacuum on), for the figures the machine's shared
// server cannot give: its WAL (pg_current_wal_lsn, pg_stat_wal) and its CPU are the whole
// cluster's, and other clients of a shared server would land in both. bench/outbox-growth.ts
// and bench/unit-costs.ts run on it.
import { readdirSync, readFileSync } from "node:fs";
import type { Sql } from "../lib/platform/db.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { privatePostgres, type PrivatePostgres } from "../testkit/private-postgres.ts";
import type { FreshDb } from "./support.ts";
import { dbLimit } from "./db-limit.ts";

// USER_HZ, the unit of utime and stime in /proc; 100 on every mainstream Linux build.
const TICKS_PER_SECOND = 100;

interface ProcStat {
  readonly ppid: number;
  /** utime + stime, in ticks. */
  readonly own: number;
  /** cutime + cstime: the CPU of the children it has reaped, in ticks. */
  readonly children: number;
}

function procStat(pid: number): ProcStat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces), counted from field 3 (state).
    const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(f[1]), own: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]) };
  } catch {
    return undefined;
  }
}

/** CPU seconds of a process so far (utime + stime); 0 once it is gone. */
export function processCpuSeconds(pid: number): number {
  return (procStat(pid)?.own ?? 0) / TICKS_PER_SECOND;
}

/**
 * CPU seconds of this process's children that have exited and been reaped (cutime + cstime):
 * across a span in which only one child ends (a wrk run, a `bun run ops`), that child's CPU.
 */
export function reapedChildrenCpuSeconds(): number {
  return (procStat(process.pid)?.children ?? 0) / TICKS_PER_SECOND;
}

/** CPU seconds the whole machine has spent busy (every state of /proc/stat's cpu line but idle and iowait). */
export function machineBusySeconds(): number {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) / TICKS_PER_SECOND;
}

export interface BenchCluster {
  readonly url: string;
  readonly postmaster: number;
  /** A fresh database on the cluster, migrations applied. */
  database(label: string): Promise<FreshDb>;
  /**
   * CPU seconds of the cluster so far: the postmaster, every live child (backends, WAL writer,
   * checkpointer, autovacuum) and, through the postmaster's cutime/cstime, every child that
   * has exited (short-lived backends, autovacuum workers): exact across any span.
   */
  cpuSeconds(): number;
  remove(): Promise<void>;
}

export async function benchCluster(): Promise<BenchCluster> {
  const server: PrivatePostgres = await privatePostgres();
  const admin = await createScratchDatabase(server.url, scratchName("bench", "probe"), { max: 1, migrate: false });
  const [row] = await admin.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  const postmaster = procStat(row!.pid)!.ppid;
  await admin.drop();
  return {
    url: server.url,
    postmaster,
    database: (label) => createScratchDatabase(server.url, scratchName("bench", label), { max: 4, applicationName: "bench" }),
    cpuSeconds() {
      const main = procStat(postmaster);
      let ticks = (main?.own ?? 0) + (main?.children ?? 0);
      for (const entry of readdirSync("/proc")) {
        if (!/^\d+$/.test(entry)) continue;
        const stat = procStat(Number(entry));
        if (stat?.ppid === postmaster) ticks += stat.own;
      }
      return ticks / TICKS_PER_SECOND;
    },
    remove: () => server.remove(),
  };
}

/** What the cluster has done so far: WAL, and transaction ids handed out. */
export interface DbCounters {
  /** pg_current_wal_lsn() as bytes since 0/0. */
  readonly walLsn: number;
  readonly walRecords: number;
  readonly walFpi: number;
  /**
   * Write transactions: the next transaction id (pg_current_snapshot's xmax, which assigns
   * none itself). Every transaction that writes a row or sends a NOTIFY takes one; a read-only
   * one does not. Exact at once, where pg_stat_database's counts wait for each backend's report.
   */
  readonly writeTransactions: number;
}

export async function dbCounters(sql: Sql): Promise<DbCounters> {
  const [row] = await sql<{ lsn: string; records: string; fpi: string; xid: string }[]>`
    select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as lsn,
           w.wal_records::text as records, w.wal_fpi::text as fpi,
           pg_snapshot_xmax(pg_current_snapshot())::text as xid
      from pg_stat_wal w`;
  return { walLsn: Number(row!.lsn), walRecords: Number(row!.records), walFpi: Number(row!.fpi), writeTransactions: Number(row!.xid) };
}

export function countersSince(before: DbCounters, after: DbCounters): DbCounters {
  return {
    walLsn: after.walLsn - before.walLsn,
    walRecords: after.walRecords - before.walRecords,
    walFpi: after.walFpi - before.walFpi,
    writeTransactions: after.writeTransactions - before.writeTransactions,
  };
}

/**
 * The machine's state when a run starts: pgbench's tps on the services' server (as
 * bench/README.md's runs quote it; NaN when the shared server refuses it, e.g. out of
 * connections, since the run itself needs only the bench's own cluster) and the load average.
 */
export async function machineState(seconds = 5): Promise<{ pgbenchTps: number; loadAverage: string }> {
  const tps = await dbLimit(32, seconds).then((l) => l.tps, () => Number.NaN);
  const loadAverage = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  return { pgbenchTps: tps, loadAverage };
}

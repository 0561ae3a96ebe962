// The API with and without the relay beside it: the one harness (row 16 of `bun run bench`,
// and `bun bench/beside.ts` alone). Two `bun api.ts` at their defaults, each on a database of
// its own, one with `bun relay.ts` publishing what it creates, both up and warm for the whole
// comparison; then pairs of wrk turns (fresh keys per request, 32 connections), the order
// alternated, and the median of the per-pair ratios. The broker runs in both arms (it is the
// same Mosquitto); the arm without a relay has none at all.
//
// A turn with the relay counts the charges created over the wrk run AND the time its relay
// took afterwards to publish the rest: a relay that falls behind during the run and catches up
// once wrk has stopped, on CPU the API no longer wants, is not free in a deployment, where the
// next request does not wait for it (see bench/README.md, "One harness for beside").
//
// Each turn also reads the CPU (/proc) of each part: the API process, its Postgres backends,
// the relay process, its backends, the broker and Postgres's own processes (WAL writer,
// checkpointer, autovacuum: shared with every database of the server), per charge created.
//   bun bench/beside.ts [pairs=6] [seconds=10]
import { readFileSync } from "node:fs";
import { answered, startApi, wrk, WARM_UP_SECONDS } from "./api-bench.ts";
import { loadAverage } from "./drain-pairs.ts";
import { freshDatabase, log, median, untilDrained, type FreshDb } from "./support.ts";
import type { Report } from "./report.ts";
import { startRelay, CONNECTIONS, DRAIN_TIMEOUT_MS, type RelayProcess } from "./relay-live.ts";
import { tokenFor } from "../testkit/auth.ts";
import { API_APP, RELAY_APP, runToExit, type Service } from "../testkit/processes.ts";

// USER_HZ, as bench/cpu.ts reads it: 100 on every mainstream Linux build.
const US_PER_TICK = 10_000;

export const PARTS = ["api", "apiPostgres", "relay", "relayPostgres", "broker", "postgresOwn"] as const;
export type Part = (typeof PARTS)[number];

/** An API on a database of its own, kept up for a whole comparison, with or without a relay beside it. */
export interface Stack {
  readonly db: FreshDb;
  readonly api: Service;
  readonly relay: RelayProcess | undefined;
}

export interface BesideRun {
  readonly withRelay: boolean;
  /** Charges created per second of the turn: the wrk run and, with a relay, its tail. */
  readonly createdPerSec: number;
  /** The API's own rate: created over the wrk run alone. */
  readonly apiPerSec: number;
  /** Seconds the relay took after the wrk run to publish the rest (0 without a relay). */
  readonly tailSeconds: number;
  readonly p99Ms: number;
  /** CPU µs per charge created, by part. */
  readonly cpu: Record<Part, number>;
}

export async function startStack(withRelay: boolean, cwd?: string, apiEnv: Record<string, string> = {}): Promise<Stack> {
  const db = await freshDatabase("beside", 2);
  let api: Service | undefined;
  try {
    api = await startApi(db, "info", apiEnv);
    const relay = withRelay ? await startRelay(db, cwd) : undefined;
    return { db, api, relay };
  } catch (error) {
    await api?.child.stop();
    await db.drop();
    throw error;
  }
}

export async function stopStack(s: Stack): Promise<void> {
  await s.relay?.service.child.stop();
  await s.api.child.stop();
  await s.db.drop();
}

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

async function pidsOf(s: Stack, broker: readonly number[]): Promise<Record<Part, number[]>> {
  const rows = await s.db.sql<{ pid: number; app: string; type: string; datname: string | null }[]>`
    select pid, application_name as app, backend_type as type, datname from pg_stat_activity`;
  const mine = (app: string): number[] => rows.filter((r) => r.datname === s.db.name && r.app === app).map((r) => r.pid);
  return {
    api: [s.api.child.pid],
    apiPostgres: mine(API_APP),
    relay: s.relay ? [s.relay.service.child.pid] : [],
    relayPostgres: mine(RELAY_APP),
    broker: [...broker],
    postgresOwn: rows.filter((r) => r.type !== "client backend").map((r) => r.pid),
  };
}

async function ticksByPart(s: Stack, broker: readonly number[]): Promise<Record<Part, number>> {
  const pids = await pidsOf(s, broker);
  return Object.fromEntries(PARTS.map((p) => [p, ticksOf(pids[p])])) as Record<Part, number>;
}

/** One turn: wrk on the stack's API for `seconds`; with a relay, until it has published what the run created. */
export async function turn(s: Stack, seconds: number, token: string, broker: readonly number[]): Promise<BesideRun> {
  const before = await ticksByPart(s, broker);
  const run = await wrk(s.api.port, CONNECTIONS, seconds, undefined, token);
  const ended = performance.now();
  if (s.relay) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
  const tailSeconds = s.relay ? (performance.now() - ended) / 1000 : 0;
  // Backends opened during the run count from their start.
  const after = await ticksByPart(s, broker);
  const created = answered(run, 201);
  const cpu = Object.fromEntries(PARTS.map((p) => [p, ((after[p] - before[p]) * US_PER_TICK) / created])) as Record<Part, number>;
  return { withRelay: s.relay !== undefined, createdPerSec: created / (seconds + tailSeconds), apiPerSec: created / seconds, tailSeconds, p99Ms: run.p99Us / 1000, cpu };
}

/** The broker's processes (Mosquitto on this machine), for its CPU. */
export async function brokerPids(): Promise<number[]> {
  const found = await runToExit(["pgrep", "-x", "mosquitto"]).catch(() => ({ stdout: "" }));
  return found.stdout.split("\n").filter(Boolean).map(Number);
}

export interface BesidePair {
  readonly alone: BesideRun;
  readonly beside: BesideRun;
  readonly load: string;
}

/** `pairs` pairs of `seconds` turns, the order alternated; each pair logged as it ends. */
export async function besidePairs(pairs: number, seconds: number): Promise<BesidePair[]> {
  const alone = await startStack(false);
  const withRelay = await startStack(true);
  const runs: BesidePair[] = [];
  try {
    const token = await tokenFor();
    const broker = await brokerPids();
    for (const s of [alone, withRelay]) await wrk(s.api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
    await untilDrained(withRelay.db.sql, DRAIN_TIMEOUT_MS);
    for (let i = 0; i < pairs; i++) {
      const load = loadAverage();
      const first = i % 2 === 0 ? await turn(alone, seconds, token, broker) : undefined;
      const beside = await turn(withRelay, seconds, token, broker);
      const a = first ?? (await turn(alone, seconds, token, broker));
      runs.push({ alone: a, beside, load });
      log(`pair ${i + 1} (load ${load}): API alone ${a.createdPerSec.toFixed(0)}/s, with the relay ${beside.createdPerSec.toFixed(0)}/s (tail ${(beside.tailSeconds * 1000).toFixed(0)} ms): ${(beside.createdPerSec / a.createdPerSec).toFixed(2)}; µs per charge alone ${describeCpu(a.cpu)}; beside ${describeCpu(beside.cpu)}`);
    }
  } finally {
    await Promise.allSettled([stopStack(alone), stopStack(withRelay)]);
  }
  return runs;
}

export function describeCpu(cpu: Record<Part, number>): string {
  return PARTS.map((p) => `${p} ${cpu[p].toFixed(0)}`).join(", ");
}

/** The medians, by part, of the arm's CPU per charge. */
export function medianCpu(runs: readonly BesideRun[]): Record<Part, number> {
  return Object.fromEntries(PARTS.map((p) => [p, median(runs.map((r) => r.cpu[p]))])) as Record<Part, number>;
}

/** `bun run bench`'s row 16. */
export async function besideSection(report: Pick<Report, "row" | "notes" | "raw">, pairs: number, seconds: number): Promise<void> {
  const runs = await besidePairs(pairs, seconds);
  report.raw.relayBeside = runs;
  const ratios = runs.map((r) => r.beside.createdPerSec / r.alone.createdPerSec);
  report.row(
    `API created/s with the relay publishing them vs with no relay (wrk, 32 conns, ${pairs} pairs of ${seconds} s alternated, the relay's tail counted)`,
    median(runs.map((r) => r.beside.createdPerSec)),
    "/s",
    ">= 0.85",
    (r) => r >= 0.85,
    median(runs.map((r) => r.alone.createdPerSec)),
    median(ratios),
  );
  const [alone, beside] = [medianCpu(runs.map((r) => r.alone)), medianCpu(runs.map((r) => r.beside))];
  report.row("relay CPU per event beside the API at its full rate", beside.relay, "µs", "-", null);
  report.row("all-in CPU per charge beside the relay (every part) vs the API alone", sum(beside), "µs", "-", null, sum(alone), sum(beside) / sum(alone));
  report.notes.push(`relay beside the API: ratio per pair ${ratios.map((r) => r.toFixed(2)).join(", ")}; tails ${runs.map((r) => (r.beside.tailSeconds * 1000).toFixed(0)).join(", ")} ms; load average per pair ${runs.map((r) => r.load).join(" | ")}`);
  report.notes.push(`CPU µs per charge, medians: alone ${describeCpu(alone)}; beside ${describeCpu(beside)}`);
}

export const sum = (cpu: Record<Part, number>): number => PARTS.reduce((n, p) => n + cpu[p], 0);

async function main(): Promise<void> {
  const [pairs, seconds] = [Number(process.argv[2] ?? 6), Number(process.argv[3] ?? 10)];
  const runs = await besidePairs(pairs, seconds);
  const ratios = runs.map((r) => r.beside.createdPerSec / r.alone.createdPerSec);
  const apiRatios = runs.map((r) => r.beside.apiPerSec / r.alone.apiPerSec);
  const [alone, beside] = [medianCpu(runs.map((r) => r.alone)), medianCpu(runs.map((r) => r.beside))];
  console.log(`created/s with the relay / alone, median of ${pairs} pairs: ${median(ratios).toFixed(2)} (${ratios.map((r) => r.toFixed(2)).join(", ")})`);
  console.log(`the same over the wrk run only (the relay's tail not counted): ${median(apiRatios).toFixed(2)} (${apiRatios.map((r) => r.toFixed(2)).join(", ")})`);
  console.log(`medians: alone ${median(runs.map((r) => r.alone.createdPerSec)).toFixed(0)}/s, beside ${median(runs.map((r) => r.beside.createdPerSec)).toFixed(0)}/s, tail ${(median(runs.map((r) => r.beside.tailSeconds)) * 1000).toFixed(0)} ms`);
  console.log(`CPU µs per charge, medians: alone ${describeCpu(alone)} (all ${sum(alone).toFixed(0)}); beside ${describeCpu(beside)} (all ${sum(beside).toFixed(0)})`);
  console.log(`load average per pair: ${runs.map((r) => r.load).join(" | ")}`);
}

if (import.meta.main) await main();

// Two settings of `bun api.ts` measured side by side: both processes at the same time on one
// database, each with half the pool and its own wrk at half the connections. Both meet the
// same machine state second by second, so the drift that moves the same code's sequential
// runs more than a small cost (bench/README.md, "HTTP histogram on vs off") cancels out of their ratio, and a
// CPU-bound pair on shared cores splits the CPU by what each request costs: a costlier request
// shows as fewer created/s. Which one starts first (and opens its pool first) alternates.
// Row 6 (the HTTP histogram's cost) runs here.
import { microsPer, sampleCpu } from "./cpu.ts";
import { answered, errorsOf, startApi, wrk, WARM_UP_SECONDS, type WrkResult } from "./api-bench.ts";
import { freshDatabase, log, median, type FreshDb } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";
import { API_APP, type Service } from "../testkit/processes.ts";

export interface SideBySide {
  /** Created/s of the API with setting `a`, and of the one with `b`, over the same seconds. */
  readonly aPerSec: number;
  readonly bPerSec: number;
  /** µs of API process CPU per charge each created (null: /proc not readable). */
  readonly aUsPerCharge: number | null;
  readonly bUsPerCharge: number | null;
  /** Each API's p99 latency over the measured seconds (µs, as wrk reports it). */
  readonly aP99Us: number;
  readonly bP99Us: number;
  /** Answers other than 201, socket errors and timeouts, both APIs, warm-up included. */
  readonly errors: number;
}

export interface Setting {
  readonly label: string;
  readonly env: Record<string, string>;
  /** A checkout of another commit to run `api.ts` from (relay-baseline.ts checkoutOf); default this one. */
  readonly cwd?: string;
  /**
   * A database of its own, left empty for its `api.ts` to migrate: for a release whose schema
   * differs (an older api.ts stops on a database migrated past what it knows). Default: the
   * one database both APIs share.
   */
  readonly ownDatabase?: boolean;
}

/** Rounds of sideBySideRun, the start order alternated: medians of the per-round ratios a/b. */
export interface Comparison {
  readonly rounds: readonly SideBySide[];
  readonly aPerSec: number;
  readonly bPerSec: number;
  readonly ratio: number;
  readonly aUsPerCharge: number;
  readonly bUsPerCharge: number;
  readonly cpuRatio: number;
  /** Medians of each API's p99 (µs), and of the per-round ratios a/b. */
  readonly aP99Us: number;
  readonly bP99Us: number;
  readonly p99Ratio: number;
  readonly errors: number;
}

export async function compareSideBySide(rounds: number, connections: number, seconds: number, a: Setting, b: Setting): Promise<Comparison> {
  const results: SideBySide[] = [];
  for (let i = 0; i < rounds; i++) results.push(await sideBySideRun(connections, seconds, a, b, i % 2 === 0));
  const us = (v: number | null) => v ?? Number.NaN;
  return {
    rounds: results,
    aPerSec: median(results.map((r) => r.aPerSec)),
    bPerSec: median(results.map((r) => r.bPerSec)),
    ratio: median(results.map((r) => r.aPerSec / r.bPerSec)),
    aUsPerCharge: median(results.map((r) => us(r.aUsPerCharge))),
    bUsPerCharge: median(results.map((r) => us(r.bUsPerCharge))),
    cpuRatio: median(results.map((r) => us(r.aUsPerCharge) / us(r.bUsPerCharge))),
    aP99Us: median(results.map((r) => r.aP99Us)),
    bP99Us: median(results.map((r) => r.bP99Us)),
    p99Ratio: median(results.map((r) => r.aP99Us / r.bP99Us)),
    errors: results.reduce((n, r) => n + r.errors, 0),
  };
}

const created = (r: WrkResult): number => answered(r, 201);

/** One round: both APIs started (`a` first when `aFirst`), warmed up together, then measured together. */
export async function sideBySideRun(connections: number, seconds: number, a: Setting, b: Setting, aFirst: boolean): Promise<SideBySide> {
  const db = await freshDatabase("sidebyside");
  const own = new Map<Setting, FreshDb>();
  for (const s of [a, b]) if (s.ownDatabase) own.set(s, await freshDatabase("sidebyside", 4, false));
  const half = Math.max(1, Math.floor(connections / 2));
  const token = await tokenFor();
  const apis: Service[] = [];
  try {
    for (const s of aFirst ? [a, b] : [b, a]) apis.push(await startApi(own.get(s) ?? db, "info", { ...s.env, API_POOL_SIZE: String(half) }, "jwt", s.cwd));
    const [apiA, apiB] = aFirst ? [apis[0]!, apis[1]!] : [apis[1]!, apis[0]!];
    const both = (s: number) => Promise.all([wrk(apiA.port, half, s, undefined, token), wrk(apiB.port, half, s, undefined, token)]);
    const warm = await both(WARM_UP_SECONDS);
    const cpuA = await sampleCpu(db.sql, API_APP, [apiA.child.pid]);
    const cpuB = await sampleCpu(db.sql, API_APP, [apiB.child.pid]);
    const [runA, runB] = await both(seconds);
    const [costA, costB] = [await cpuA.stop(), await cpuB.stop()];
    const result: SideBySide = {
      aPerSec: created(runA) / (runA.durationUs / 1e6),
      bPerSec: created(runB) / (runB.durationUs / 1e6),
      aUsPerCharge: microsPer(costA.processS, created(runA)),
      bUsPerCharge: microsPer(costB.processS, created(runB)),
      aP99Us: runA.p99Us,
      bP99Us: runB.p99Us,
      errors: [...warm, runA, runB].reduce((n, r) => n + errorsOf(r), 0),
    };
    log(`side by side (${(aFirst ? a : b).label} started first): ${a.label} ${describe(result.aPerSec, result.aUsPerCharge, result.aP99Us)} | ${b.label} ${describe(result.bPerSec, result.bUsPerCharge, result.bP99Us)}`);
    return result;
  } finally {
    await Promise.all(apis.map((api) => api.child.stop()));
    await Promise.all([db, ...own.values()].map((d) => d.drop()));
  }
}

function describe(perSec: number, us: number | null, p99Us: number): string {
  return `${Math.round(perSec)} created/s, ${us === null ? "-" : us.toFixed(1)} µs/charge, p99 ${(p99Us / 1000).toFixed(1)} ms`;
}

// Row 16's rows and notes (bench/processor-bench.ts): the processor mode's created/s against
// the issue's target, 0.8 × min(clients / latency, half the ledger's created/s in the same
// pair), and against the floor a charge's calls set, clients / (calls × latency).
import type { Report } from "./report.ts";
import type { Comparison } from "./side-by-side.ts";
import { median } from "./support.ts";

export type Mode = "processor" | "ledger";

export interface ConnectionSample {
  readonly connections: number;
  readonly idleInTransaction: number;
  readonly active: number;
  /** The longest any of them had been idle inside a transaction, and the oldest open transaction (ms). */
  readonly longestIdleInTxMs: number;
  readonly oldestTransactionMs: number;
  /** The last statement of each connection idle in a transaction (its first words): which phase holds it. */
  readonly idleStatements: readonly string[];
  /** Calls the simulator held (in flight) at that moment; null in the ledger mode. */
  readonly callsInFlight: number | null;
}

export interface ModeRun {
  readonly mode: Mode;
  readonly connections: number;
  readonly createdPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Answers by status over the warm-up and the run, and everything not a 201 (socket errors and timeouts included). */
  readonly statuses: Record<string, number>;
  readonly errors: number;
  readonly apiUsPerCharge: number | null;
  readonly postgresUsPerCharge: number | null;
  /** This process's CPU per charge over the run: the simulator's (it runs here), and the sampling's. */
  readonly benchUsPerCharge: number | null;
  readonly samples: readonly ConnectionSample[];
  /** Processor mode, over the process's whole life once settled: payments created and confirmations, per charge. */
  readonly createsPerCharge: number | null;
  readonly confirmsPerCharge: number | null;
  /** The API's error log lines by answer and cause (e.g. "503 POOL_WAIT_TIMEOUT"), and the first few other than the pool's. */
  readonly errorCauses: Record<string, number>;
  readonly errorLines: readonly string[];
  /** Charges by status once the requests cut off by wrk's end have finished. */
  readonly chargesByStatus: Record<string, number>;
}

export interface ProcessorPair {
  /** The ledger at the processor's 400 clients, the processor mode, the ledger at the usual 32. */
  readonly ledger: ModeRun;
  readonly processor: ModeRun;
  /** The processor mode with the charge's 200 ms split over its two calls: the issue's 400 / 0.2 s. */
  readonly perCharge: ModeRun;
  readonly ledgerAt32: ModeRun;
}

export interface Load {
  readonly connections: number;
  readonly latencyMs: number;
  readonly callsPerCharge: number;
  readonly pool: number;
  /** The ledger's usual load: the second ledger run and the side by side. */
  readonly ledgerConnections: number;
}

// The issue's share of its bound the processor mode must reach.
const TARGET_SHARE = 0.8;
// The ledger side by side with the API before the processor: created/s at least this share.
const LEDGER_TARGET = 0.95;

/** The issue's bound: min(clients / one call's latency, half the ledger mode's created/s). */
export function issueBound(load: Load, ledgerPerSec: number): number {
  return Math.min(load.connections / (load.latencyMs / 1000), ledgerPerSec / 2);
}

/** What the clients can get at best when each charge waits for its calls one after the other. */
export function chargeFloorBound(load: Load): number {
  return load.connections / ((load.callsPerCharge * load.latencyMs) / 1000);
}

const peak = (runs: readonly ModeRun[], f: (s: ConnectionSample) => number | null): number =>
  Math.max(0, ...runs.flatMap((r) => r.samples.map((s) => f(s) ?? 0)));

export function reportProcessor(report: Report, pairs: readonly ProcessorPair[], side: Comparison, load: Load): void {
  const { row, notes } = report;
  const at = (f: (p: ProcessorPair) => number | null) => median(pairs.map((p) => f(p) ?? Number.NaN));
  const processor = at((p) => p.processor.createdPerSec);
  const bounds = pairs.map((p) => issueBound(load, p.ledger.createdPerSec));
  const floor = chargeFloorBound(load);
  const c = load.connections;
  row(`processor created/s (${c} clients, ${load.latencyMs} ms per call, pool ${load.pool}) vs min(${c} / ${load.latencyMs / 1000} s, ledger at ${c} / 2)`, processor, "/s", "-", null, median(bounds), median(pairs.map((p, i) => p.processor.createdPerSec / (bounds[i] ?? Number.NaN))));
  const perCharge = at((p) => p.perCharge.createdPerSec);
  const perChargeLoad = { ...load, latencyMs: load.latencyMs / load.callsPerCharge };
  const perChargeBounds = pairs.map((p) => Math.min(load.connections / (load.latencyMs / 1000), p.ledger.createdPerSec / 2));
  row(`processor created/s (${c} clients, ${load.latencyMs} ms per charge: ${perChargeLoad.latencyMs} ms per call) vs min(${c} / ${load.latencyMs / 1000} s, ledger at ${c} / 2)`, perCharge, "/s", `>= ${TARGET_SHARE}`, (r) => r >= TARGET_SHARE, median(perChargeBounds), median(pairs.map((p, i) => p.perCharge.createdPerSec / (perChargeBounds[i] ?? Number.NaN))));
  row("processor p50 / p99 (ms), 200 ms per charge", at((p) => p.perCharge.p50Ms), "ms", "-", null, at((p) => p.perCharge.p99Ms));
  row(`processor created/s vs the per-charge floor ${c} / (${load.callsPerCharge} × ${load.latencyMs / 1000} s)`, processor, "/s", "-", null, floor, processor / floor);
  row(`ledger created/s at ${c} clients, pool ${load.pool}`, at((p) => p.ledger.createdPerSec), "/s", "-", null);
  row(`ledger created/s at ${load.ledgerConnections} clients, pool ${load.pool}`, at((p) => p.ledgerAt32.createdPerSec), "/s", "-", null);
  row("processor p50 / p99 (ms)", at((p) => p.processor.p50Ms), "ms", "-", null, at((p) => p.processor.p99Ms));
  row("API CPU per charge, processor vs ledger (both at 400 clients)", at((p) => p.processor.apiUsPerCharge), "µs", "-", null, at((p) => p.ledger.apiUsPerCharge), at((p) => (p.processor.apiUsPerCharge ?? Number.NaN) / (p.ledger.apiUsPerCharge ?? Number.NaN)));
  row("Postgres CPU per charge, processor vs ledger (both at 400 clients)", at((p) => p.processor.postgresUsPerCharge), "µs", "-", null, at((p) => p.ledger.postgresUsPerCharge), at((p) => (p.processor.postgresUsPerCharge ?? Number.NaN) / (p.ledger.postgresUsPerCharge ?? Number.NaN)));
  const runs = pairs.flatMap((p) => [p.processor, p.perCharge]);
  row(`processor run: most API connections seen (pool ${load.pool})`, peak(runs, (s) => s.connections), "", `<= ${load.pool}`, (v) => v <= load.pool);
  row("processor run: most API connections idle in transaction", peak(runs, (s) => s.idleInTransaction), "", "0", (v) => v === 0);
  row("processor run: longest idle in transaction / oldest transaction at a sample (ms)", peak(runs, (s) => s.longestIdleInTxMs), "ms", "-", null, peak(runs, (s) => s.oldestTransactionMs));
  row("this process's CPU per charge (the simulator's), processor run", at((p) => p.processor.benchUsPerCharge), "µs", "-", null);
  row("processor run: fewest processor calls in flight at a sample", Math.min(...runs.flatMap((r) => r.samples.map((s) => s.callsInFlight ?? 0))), "", "-", null);
  row("processor: payments created / confirmations per charge", at((p) => p.processor.createsPerCharge), "", "1 / 1", null, at((p) => p.processor.confirmsPerCharge));
  row(`ledger created/s, this API vs the API before the processor (side by side, ${load.ledgerConnections} clients)`, side.aPerSec, "/s", `>= ${LEDGER_TARGET}`, (v) => v >= LEDGER_TARGET, side.bPerSec, side.ratio);
  row("ledger API CPU per charge, this API vs before (side by side)", side.aUsPerCharge, "µs", "-", null, side.bUsPerCharge, side.cpuRatio);
  notes.push(`ledger vs before: created/s per round ${side.rounds.map((r) => (r.aPerSec / r.bPerSec).toFixed(3)).join(", ")}`);
  for (const [i, p] of pairs.entries()) {
    for (const r of [p.ledger, p.processor, p.perCharge, p.ledgerAt32]) {
      if (r.errors > 0) notes.push(`pair ${i + 1}, ${r.mode} at ${r.connections}: ${r.errors} answers not 201 or socket errors (statuses ${JSON.stringify(r.statuses)})`);
    }
    for (const r of [p.ledger, p.processor, p.perCharge, p.ledgerAt32]) {
      if (Object.keys(r.errorCauses).length > 0) notes.push(`pair ${i + 1}, ${r.mode} at ${r.connections}: API error lines by cause ${JSON.stringify(r.errorCauses)}`);
      for (const line of r.errorLines) notes.push(`pair ${i + 1}, ${r.mode} at ${r.connections}: ${line}`);
    }
    notes.push(`pair ${i + 1}, processor: statements of the connections idle in transaction ${JSON.stringify([...new Set(p.processor.samples.flatMap((s) => s.idleStatements))])}`);
    notes.push(`pair ${i + 1}, processor charges by status once settled: ${JSON.stringify(p.processor.chargesByStatus)}`);
  }
  if (side.errors > 0) notes.push(`ledger vs before: ${side.errors} non-201 or socket errors`);
}

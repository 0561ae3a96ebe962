// The operation core against another commit's (#38 item 5): created/s of the ledger (32
// connections, unique keys) and of processor mode (400 connections, the simulator at 200 ms a
// call), this checkout and the other alternated in one run, which goes first swapping each pair.
//   bun bench/core-ab.ts <baseline ref or checkout dir> [pairs=4, rounded up to even] [seconds=10]
import { existsSync } from "node:fs";
import { answered, startApi, warmThenMeasure } from "./api-bench.ts";
import { modeRun, PROCESSOR_LATENCY_MS } from "./processor-bench.ts";
import { checkoutOf } from "./relay-baseline.ts";
import { freshDatabase, log, median } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";
import { API_APP } from "../testkit/processes.ts";
import { startProcessorSim } from "../testkit/processor-sim.ts";
import { privatePostgres } from "../testkit/private-postgres.ts";

const LEDGER_CONNECTIONS = 32;
const PROCESSOR_CONNECTIONS = 400;

const [ref, pairsArg, secondsArg] = process.argv.slice(2);
if (!ref) {
  console.error("usage: bun bench/core-ab.ts <baseline ref or checkout dir> [pairs=4, rounded up to even] [seconds=10]");
  process.exit(2);
}
// Rounded up to even: which checkout goes first alternates, and the first ledger run of a pair
// follows the last pair's processor runs (400 connections' calls still draining); an odd count
// gave one order an extra say in the median (bench/README.md, issue 38's row).
const [pairs, seconds] = [2 * Math.ceil(Number(pairsArg ?? 4) / 2), Number(secondsArg ?? 10)];
// BENCH_PRIVATE_POSTGRES=1: a Postgres of the bench's own (the machine's may be full of others' connections).
const own = process.env.BENCH_PRIVATE_POSTGRES === "1" ? await privatePostgres() : undefined;
if (own) process.env.DATABASE_URL = own.url;
const checkout = existsSync(ref) ? { dir: ref, remove: async () => {} } : await checkoutOf(ref);

async function ledgerRun(cwd: string | undefined): Promise<number> {
  // Empty: each api.ts migrates it at start, as it would a new deployment's.
  const db = await freshDatabase("core_ab", 4, false);
  const api = await startApi(db, "warn", { PAYMENT_PROCESSOR: "none" }, "jwt", cwd);
  try {
    const { run } = await warmThenMeasure(db, api.port, LEDGER_CONNECTIONS, seconds, await tokenFor(), API_APP, [api.child.pid]);
    return answered(run, 201) / (run.durationUs / 1e6);
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

const sim = await startProcessorSim({ latencyMs: PROCESSOR_LATENCY_MS });
const ratios = { ledger: [] as number[], processor: [] as number[] };
const rates = { ledger: { this: [] as number[], before: [] as number[] }, processor: { this: [] as number[], before: [] as number[] } };
try {
  for (let i = 0; i < pairs; i++) {
    const order = i % 2 === 0 ? ([undefined, checkout.dir] as const) : ([checkout.dir, undefined] as const);
    const ledger = new Map<string | undefined, number>();
    for (const cwd of order) ledger.set(cwd, await ledgerRun(cwd));
    const processor = new Map<string | undefined, number>();
    for (const cwd of order) processor.set(cwd, (await modeRun("processor", PROCESSOR_CONNECTIONS, seconds, sim, cwd)).createdPerSec);
    const [ln, lb, pn, pb] = [ledger.get(undefined)!, ledger.get(checkout.dir)!, processor.get(undefined)!, processor.get(checkout.dir)!];
    rates.ledger.this.push(ln);
    rates.ledger.before.push(lb);
    rates.processor.this.push(pn);
    rates.processor.before.push(pb);
    ratios.ledger.push(ln / lb);
    ratios.processor.push(pn / pb);
    log(`pair ${i + 1} (${order[0] === undefined ? "this first" : "before first"}): ledger ${Math.round(ln)} vs ${Math.round(lb)} created/s (${(ln / lb).toFixed(3)}), processor ${Math.round(pn)} vs ${Math.round(pb)} (${(pn / pb).toFixed(3)})`);
  }
  const ofMedians = (xs: number[], ys: number[]) => (median(xs) / median(ys)).toFixed(3);
  log(`each side's median over the pairs, this / before: ledger ${ofMedians(rates.ledger.this, rates.ledger.before)}, processor ${ofMedians(rates.processor.this, rates.processor.before)}`);
  log(`median ratios, this / before: ledger ${median(ratios.ledger).toFixed(3)} (${ratios.ledger.map((r) => r.toFixed(3)).join(", ")}), processor ${median(ratios.processor).toFixed(3)} (${ratios.processor.map((r) => r.toFixed(3)).join(", ")})`);
} finally {
  await sim.stop();
  await checkout.remove();
  await own?.remove();
}
process.exit(0);

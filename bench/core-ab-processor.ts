// One processor-mode run of this checkout and one of another (bench/core-ab.ts's), described in full.
//   bun bench/core-ab-processor.ts <checkout dir> [seconds=8]
import { describeMode, modeRun, PROCESSOR_LATENCY_MS } from "./processor-bench.ts";
import { log } from "./support.ts";
import { privatePostgres } from "../testkit/private-postgres.ts";
import { startProcessorSim } from "../testkit/processor-sim.ts";

const [dir, secondsArg] = process.argv.slice(2);
const own = process.env.BENCH_PRIVATE_POSTGRES === "1" ? await privatePostgres() : undefined;
if (own) process.env.DATABASE_URL = own.url;
const sim = await startProcessorSim({ latencyMs: PROCESSOR_LATENCY_MS });
try {
  for (const cwd of [undefined, dir]) log(`${cwd ?? "this"}: ${describeMode(await modeRun("processor", 400, Number(secondsArg ?? 8), sim, cwd))}`);
} finally {
  await sim.stop();
  await own?.remove();
}
process.exit(0);

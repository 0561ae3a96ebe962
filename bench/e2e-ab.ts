// Commit → subscriber latency with this relay against another commit's (relay-baseline.ts
// checkoutOf), beside this API, runs alternated (e2e-bench.ts e2eRun, its warm-up included).
//   bun bench/e2e-ab.ts <baseline ref> [pairs=3] [rate=200] [seconds=10]
import { e2eRun, type E2e } from "./e2e-bench.ts";
import { checkoutOf } from "./relay-baseline.ts";
import { loadAverage } from "./drain-pairs.ts";
import { log } from "./support.ts";

const [ref, pairsArg, rateArg, secondsArg] = process.argv.slice(2);
if (!ref) {
  console.error("usage: bun bench/e2e-ab.ts <baseline ref> [pairs=3] [rate=200] [seconds=10]");
  process.exit(2);
}
const [pairs, rate, seconds] = [Number(pairsArg ?? 3), Number(rateArg ?? 200), Number(secondsArg ?? 10)];
const baseline = await checkoutOf(ref);
const describe = (e: E2e): string => `p50 ${e.fromCreatedAt.p50.toFixed(1)} p99 ${e.fromCreatedAt.p99.toFixed(1)} max ${e.fromCreatedAt.max.toFixed(1)} ms (${e.received}/${e.created})`;
try {
  for (let i = 0; i < pairs; i++) {
    const load = loadAverage();
    const first = i % 2 === 0 ? await e2eRun(rate, seconds) : undefined;
    const before = await e2eRun(rate, seconds, baseline.dir);
    const now = first ?? (await e2eRun(rate, seconds));
    log(`pair ${i + 1} at ${rate}/s (load ${load}): this ${describe(now)} | before ${describe(before)}`);
  }
} finally {
  await baseline.remove();
}

// A relay change against the code before it, alternated in one run: this checkout's `bun
// relay.ts` and a `git worktree` of another commit's (relay-baseline.ts checkoutOf) drain the
// same backlog in turn, pair after pair; per pair the ratio this / before, and their median.
//   bun bench/relay-ab.ts <baseline ref> [pairs=3] [rows=50000] [created|chains ...]
import { checkoutOf } from "./relay-baseline.ts";
import { relayDrain, type RelayDrain } from "./mqtt-bench.ts";
import { log, median } from "./support.ts";
import { machineState } from "./cluster.ts";

const [ref, pairsArg, rowsArg, ...kinds] = process.argv.slice(2);
if (!ref) {
  console.error("usage: bun bench/relay-ab.ts <baseline ref> [pairs=3] [rows=50000] [created|chains ...]");
  process.exit(2);
}
const pairs = Number(pairsArg ?? 3);
const rows = Number(rowsArg ?? 50_000);
const backlogs = (kinds.length > 0 ? kinds : ["created", "chains"]) as ("created" | "chains")[];
const baseline = await checkoutOf(ref);
const rate = (d: RelayDrain): number => Math.round(d.rowsPerSec);
try {
  log(`machine: ${JSON.stringify(await machineState())}`);
  for (const backlog of backlogs) {
    const ratios: number[] = [];
    for (let i = 0; i < pairs; i++) {
      // The order within a pair alternates too, so a drift during the run falls on both.
      const first = i % 2 === 0;
      const a = first ? await relayDrain(rows, {}, { backlog }) : undefined;
      const b = await relayDrain(rows, {}, { backlog, cwd: baseline.dir });
      const now = a ?? (await relayDrain(rows, {}, { backlog }));
      ratios.push(now.rowsPerSec / b.rowsPerSec);
      log(`${backlog} pair ${i + 1}: this ${rate(now)} rows/s, before ${rate(b)} rows/s: ${(now.rowsPerSec / b.rowsPerSec).toFixed(2)}`);
    }
    console.log(`${backlog}: this / before, median of ${pairs} pairs: ${median(ratios).toFixed(2)} (${ratios.map((r) => r.toFixed(2)).join(", ")})`);
  }
} finally {
  await baseline.remove();
}

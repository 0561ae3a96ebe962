// A relay change against the code before it, in tight alternation (drain-pairs.ts): this
// checkout's `bun relay.ts` and a `git worktree` of another commit's (relay-baseline.ts
// checkoutOf), each kept running and warm on a database of its own, drain the same backlog in
// turn, round after round, the order alternated; per round the ratio this / before, and their
// median. With `--client`, a bare mqtt.js client (1,000 and the Receive Maximum in flight)
// takes its turns too, and the drains are also given against it.
//   bun bench/relay-ab.ts <baseline ref> [rounds=9] [rows=10000] [created|chains ...] [--client]
import { checkoutOf } from "./relay-baseline.ts";
import { alternate, clientSide, loadAverage, openBareClient, ratiosOf, relaySide, warmRelay, type BareClient, type CostedDrain, type Side } from "./drain-pairs.ts";
import { log, median } from "./support.ts";

const args = process.argv.slice(2).filter((a) => a !== "--client");
const withClient = process.argv.includes("--client");
const [ref, roundsArg, rowsArg, ...kinds] = args;
if (!ref) {
  console.error("usage: bun bench/relay-ab.ts <baseline ref> [rounds=9] [rows=10000] [created|chains ...] [--client]");
  process.exit(2);
}
const rounds = Number(roundsArg ?? 9);
const rows = Number(rowsArg ?? 10_000);
const backlogs = (kinds.length > 0 ? kinds : ["created", "chains"]) as ("created" | "chains")[];
const baseline = await checkoutOf(ref);
const clients: BareClient[] = withClient ? [await openBareClient(), await openBareClient("receive-maximum")] : [];
const [ours, before] = [await warmRelay(), await warmRelay({}, baseline.dir)];
const fixed = (xs: number[]): string => xs.map((x) => x.toFixed(2)).join(", ");
try {
  for (const backlog of backlogs) {
    const sides: Side[] = [relaySide("this", ours, backlog), relaySide("before", before, backlog), ...clients.map((c) => clientSide(`bare ${c.window}`, c))];
    const r = await alternate(sides, rounds, rows, (i, x) => log(`${backlog} round ${i + 1} (load ${loadAverage()}): ${Object.entries(x).map(([k, v]) => `${k} ${Math.round(v)}/s`).join(", ")}`));
    const ab = ratiosOf(r, "this", "before");
    console.log(`${backlog}: this / before, median of ${rounds} rounds: ${ab.median.toFixed(2)} (${fixed(ab.each)})`);
    for (const c of clients) {
      for (const side of ["this", "before"]) {
        const x = ratiosOf(r, side, `bare ${c.window}`);
        console.log(`${backlog}: ${side} / bare client at ${c.window} in flight: ${x.median.toFixed(2)} (${fixed(x.each)})`);
      }
    }
    for (const side of sides.filter((x) => x.drains)) {
      const cpu = (f: (d: CostedDrain) => number): string => median(side.drains!.map(f)).toFixed(1);
      console.log(`${backlog}: ${side.name}: CPU per row, median: relay ${cpu((d) => d.relayUsPerRow)} µs, its Postgres backends ${cpu((d) => d.postgresUsPerRow)} µs`);
    }
    console.log(`load average per round: ${r.loadAverages.join(" | ")}`);
  }
} finally {
  await Promise.allSettled([ours.stop(), before.stop(), ...clients.map((c) => c.close())]);
  await baseline.remove();
}

// The API beside this relay against the API beside another commit's relay (relay-baseline.ts
// checkoutOf), and against the API alone: three stacks up and warm, each on a database of its
// own, short wrk turns on each in a rotated order, round by round (relay-live.ts turn). Each
// relay's created/s ratio to the API alone of its round, and its CPU per event.
//   bun bench/beside-ab.ts <baseline ref> [rounds=6] [seconds=5]
import { CONNECTIONS, DRAIN_TIMEOUT_MS, startStack, stopStack, turn, type BesideRun, type Stack } from "./relay-live.ts";
import { wrk, WARM_UP_SECONDS } from "./api-bench.ts";
import { checkoutOf } from "./relay-baseline.ts";
import { loadAverage } from "./drain-pairs.ts";
import { log, median, untilDrained } from "./support.ts";
import { tokenFor } from "../testkit/auth.ts";

const [ref, roundsArg, secondsArg] = process.argv.slice(2);
if (!ref) {
  console.error("usage: bun bench/beside-ab.ts <baseline ref> [rounds=6] [seconds=5]");
  process.exit(2);
}
const [rounds, seconds] = [Number(roundsArg ?? 6), Number(secondsArg ?? 5)];
// Three APIs at the default pool (32) and two relays would take more than Postgres's 100
// connections; all three get the same smaller pool.
const API_ENV = { API_POOL_SIZE: "16" };
const baseline = await checkoutOf(ref);
const stacks: Stack[] = [];
try {
  const alone = await startStack(false, undefined, API_ENV);
  stacks.push(alone);
  const ours = await startStack(true, undefined, API_ENV);
  stacks.push(ours);
  const before = await startStack(true, baseline.dir, API_ENV);
  stacks.push(before);
  const token = await tokenFor();
  for (const s of stacks) await wrk(s.api.port, CONNECTIONS, WARM_UP_SECONDS, undefined, token);
  for (const s of [ours, before]) await untilDrained(s.db.sql, DRAIN_TIMEOUT_MS);
  const ratios = { ours: [] as number[], before: [] as number[] };
  const cpu = { ours: [] as number[], before: [] as number[] };
  const names = ["alone", "ours", "before"] as const;
  for (let i = 0; i < rounds; i++) {
    const load = loadAverage();
    const order = [0, 1, 2].map((k) => (k + i) % 3);
    const runs: BesideRun[] = [];
    for (const k of order) runs[k] = await turn(stacks[k] as Stack, seconds, token);
    const [a, o, b] = runs as [BesideRun, BesideRun, BesideRun];
    ratios.ours.push(o.createdPerSec / a.createdPerSec);
    ratios.before.push(b.createdPerSec / a.createdPerSec);
    cpu.ours.push(o.relayUsPerEvent ?? Number.NaN);
    cpu.before.push(b.relayUsPerEvent ?? Number.NaN);
    log(`round ${i + 1} (load ${load}, order ${order.map((k) => names[k]).join(" ")}): alone ${a.createdPerSec.toFixed(0)}/s; this ${o.createdPerSec.toFixed(0)}/s (${(o.createdPerSec / a.createdPerSec).toFixed(2)}, relay ${o.relayUsPerEvent?.toFixed(0)} µs/event); before ${b.createdPerSec.toFixed(0)}/s (${(b.createdPerSec / a.createdPerSec).toFixed(2)}, relay ${b.relayUsPerEvent?.toFixed(0)} µs/event)`);
  }
  log(`median ratio to the API alone: this ${median(ratios.ours).toFixed(2)}, before ${median(ratios.before).toFixed(2)}; relay µs/event: this ${median(cpu.ours).toFixed(0)}, before ${median(cpu.before).toFixed(0)}`);
} finally {
  await Promise.allSettled(stacks.map(stopStack));
  await baseline.remove();
}

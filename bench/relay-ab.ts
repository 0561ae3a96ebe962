// A relay change against the code before it, in tight alternation (drain-pairs.ts): this
// checkout's `bun relay.ts` and a `git worktree` of another commit's (relay-baseline.ts
// checkoutOf), each kept running and warm on a database of its own, drain the same backlog in
// turn, round after round, the order alternated; per round the ratio this / before, and their
// median. With `--client`, a bare mqtt.js client (1,000 and the Receive Maximum in flight)
// takes its turns too, and the drains are also given against it. `--batch=10,50,200` runs the
// comparison at each OUTBOX_BATCH_SIZE in turn (both relays restarted with it; default: the
// default size); `--subscriber` keeps a QoS 1 subscriber to every bench topic on the broker
// for the whole run, as a deployment has one (the broker then forwards every publish).
//   bun bench/relay-ab.ts <baseline ref> [rounds=9] [rows=10000] [created|chains ...] [--client] [--subscriber] [--batch=N,...]
import mqtt from "mqtt";
import { checkoutOf } from "./relay-baseline.ts";
import { alternate, clientSide, loadAverage, openBareClient, ratiosOf, relaySide, warmRelay, type BareClient, type CostedDrain, type Side, type WarmRelay } from "./drain-pairs.ts";
import { benchServices, log, median } from "./support.ts";

const flags = process.argv.slice(2).filter((a) => a.startsWith("--"));
const args = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const withClient = flags.includes("--client");
const withSubscriber = flags.includes("--subscriber");
const batches = (flags.find((f) => f.startsWith("--batch="))?.slice("--batch=".length).split(",") ?? [""]).filter((b, i, all) => b !== "" || all.length === 1);
const [ref, roundsArg, rowsArg, ...kinds] = args;
if (!ref || batches.some((b) => b !== "" && !(Number(b) > 0))) {
  console.error("usage: bun bench/relay-ab.ts <baseline ref> [rounds=9] [rows=10000] [created|chains ...] [--client] [--subscriber] [--batch=N,...]");
  process.exit(2);
}
const rounds = Number(roundsArg ?? 9);
const rows = Number(rowsArg ?? 10_000);
const backlogs = (kinds.length > 0 ? kinds : ["created", "chains"]) as ("created" | "chains")[];
const baseline = await checkoutOf(ref);
const clients: BareClient[] = withClient ? [await openBareClient(), await openBareClient("receive-maximum")] : [];
const subscriber = withSubscriber ? await mqtt.connectAsync((await benchServices()).mqttUrl, { protocolVersion: 5 }) : undefined;
await subscriber?.subscribeAsync("bench/#", { qos: 1 });
const fixed = (xs: number[]): string => xs.map((x) => x.toFixed(2)).join(", ");

async function compare(label: string, ours: WarmRelay, before: WarmRelay): Promise<void> {
  for (const backlog of backlogs) {
    const sides: Side[] = [relaySide("this", ours, backlog), relaySide("before", before, backlog), ...clients.map((c) => clientSide(`bare ${c.window}`, c))];
    const r = await alternate(sides, rounds, rows, (i, x) => log(`${label}${backlog} round ${i + 1} (load ${loadAverage()}): ${Object.entries(x).map(([k, v]) => `${k} ${Math.round(v)}/s`).join(", ")}`));
    const ab = ratiosOf(r, "this", "before");
    console.log(`${label}${backlog}: this / before, median of ${rounds} rounds: ${ab.median.toFixed(2)} (${fixed(ab.each)})`);
    for (const side of sides.filter((x) => x.drains)) console.log(`${label}${backlog}: ${side.name}: median ${Math.round(median(r.rates[side.name] ?? []))} rows/s`);
    for (const c of clients) {
      for (const side of ["this", "before"]) {
        const x = ratiosOf(r, side, `bare ${c.window}`);
        console.log(`${label}${backlog}: ${side} / bare client at ${c.window} in flight: ${x.median.toFixed(2)} (${fixed(x.each)})`);
      }
    }
    for (const side of sides.filter((x) => x.drains)) {
      const cpu = (f: (d: CostedDrain) => number): string => median(side.drains!.map(f)).toFixed(1);
      console.log(`${label}${backlog}: ${side.name}: CPU per row, median: relay ${cpu((d) => d.relayUsPerRow)} µs, its Postgres backends ${cpu((d) => d.postgresUsPerRow)} µs`);
    }
    console.log(`${label}${backlog}: load average per round: ${r.loadAverages.join(" | ")}`);
  }
}

try {
  for (const batch of batches) {
    const env: Record<string, string> = batch === "" ? {} : { OUTBOX_BATCH_SIZE: batch };
    const [ours, before] = [await warmRelay(env), await warmRelay(env, baseline.dir)];
    try {
      await compare(batch === "" ? "" : `OUTBOX_BATCH_SIZE=${batch}: `, ours, before);
    } finally {
      await Promise.allSettled([ours.stop(), before.stop()]);
    }
  }
} finally {
  await Promise.allSettled([...clients.map((c) => c.close()), subscriber?.endAsync()]);
  await baseline.remove();
}

// `bun run chaos:history`: one run with every fault, in the way of Jepsen. Clients (the
// project's client, default options) send charges, refunds, captures and cancels through a
// lossy proxy while a nemesis, on a schedule drawn from the seed, SIGKILLs and restarts an API,
// the relay and the subscriber, restarts the broker and Postgres, cuts the network at the proxy
// and makes the processor fail; at least four faults are on at once in the storm. Then it heals
// everything, waits for the completer and the relay, and writes the history (one JSON object a
// line: operations, the processor's effects, the committed events, the subscriber's deliveries,
// a plain receiver's receipts, the nemesis's windows). `bun run chaos:check FILE` judges it.
// Options: --seed N, --duration SECONDS, --out FILE. The history's path is the last line.
import { collect, type Collector } from "../../testkit/mqtt.ts";
import { killAll } from "../../testkit/processes.ts";
import { LOG_DIR } from "../lib/harness.ts";
import { sleep } from "../../testkit/wait.ts";
import { parseArgs, type RunOptions } from "./args.ts";
import { Attribution, startClients } from "./clients.ts";
import { LedgerWatch } from "./effects.ts";
import type { ArrivalRecord } from "./history.ts";
import { runNemesis } from "./nemesis.ts";
import { Recorder } from "./recorder.ts";
import { overlapOf, schedule } from "./schedule.ts";
import { committedEvents, settle } from "./settle.ts";
import { startSystem, type System } from "./system.ts";

// Logical client processes, each with its own client: several processes' worth of concurrency.
const CLIENTS = 12;
const PLAIN_CONSUMER = "plain-mqtt";

const parsed = parseArgs(process.argv.slice(2));
if ("error" in parsed) {
  console.error(`chaos:history: ${parsed.error}`);
  process.exit(2);
}
const options: RunOptions = parsed;
const windows = schedule(options.seed, options.durationMs);
console.log(`chaos:history: seed ${options.seed}, ${options.durationMs / 1000} s, ${windows.length} nemesis windows, at most ${overlapOf(windows)} faults at once (replay: --seed ${options.seed} --duration ${options.durationMs / 1000}); the processes' logs: ${LOG_DIR}`);
const recorder = new Recorder(options.out);
const system = await startSystem(options.seed);
let failed = false;
try {
  await run(system);
} catch (error) {
  failed = true;
  console.error(`chaos:history: the run stopped: ${error instanceof Error ? error.stack : String(error)}`);
} finally {
  recorder.flush();
  await system.close().catch(() => {});
  await killAll();
}
console.log(options.out);
process.exit(failed ? 1 : 0);

async function run(s: System): Promise<void> {
  const receiver = await collect(s.broker.url, s.prefix, { clientId: `history-plain-${options.seed}`, persistent: true });
  const attribution = new Attribution();
  const ledger = new LedgerWatch(() => s.sim.ledger());
  ledger.start();
  const flusher = setInterval(() => recorder.flush(), 1000);
  try {
    const t0 = Date.now();
    const clients = startClients(s.proxy.url, CLIENTS, options.seed, recorder, attribution);
    const nemesis = runNemesis(windows, s.actions, t0, recorder);
    await sleep(options.durationMs);
    clients.stop();
    await nemesis;
    await clients.done;
    console.log(`chaos:history: load and faults over after ${((Date.now() - t0) / 1000).toFixed(1)} s; healed`);
    const delivered = async (): Promise<Set<string>> => new Set([...s.subscriber.records, ...(await s.subscriber.fromInbox(s.db.sql))].map((r) => r.event_id));
    await settle(s.db.sql, async () => ({ deliveries: await delivered(), receipts: new Set(receiptsOf(receiver).map((r) => r.event_id)) }));
    ledger.stop();
    for (const e of ledger.effects(attribution)) recorder.add(e);
    for (const c of await committedEvents(s.db.sql)) recorder.add(c);
    for (const d of [...s.subscriber.records, ...(await s.subscriber.fromInbox(s.db.sql))]) recorder.add(d);
    for (const r of receiptsOf(receiver)) recorder.add(r);
  } finally {
    clearInterval(flusher);
    await receiver.close();
  }
}

/** The plain receiver's messages that are events, in arrival order, redeliveries included. */
function receiptsOf(receiver: Collector): ArrivalRecord[] {
  return receiver.messages.flatMap((m) => m.envelope && m.envelope.sequence !== undefined
    ? [{ type: "receipt" as const, consumer: PLAIN_CONSUMER, event_id: m.envelope.id, aggregate: m.envelope.aggregateId, sequence: m.envelope.sequence, time: performance.timeOrigin + m.at }]
    : []);
}

// The system under the history run, all of it private to the run: a Postgres (the embedded
// one, its own cluster and port) and a Mosquitto (persistence on, no queue limit), the
// processor simulator in this process, two `bun api.ts` behind the lossy fault proxy, the relay
// (which runs the completer) reaching the broker through a link that can be cut, the reference
// subscriber; and what the nemesis does to each.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { authEnv } from "../../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../../testkit/database.ts";
import { seeded, sharesDecider, startFaultProxy, type Fate, type FaultProxy } from "../../testkit/http-fault-proxy.ts";
import { privateMosquitto, type PrivateBroker } from "../../testkit/mosquitto.ts";
import { privatePostgres } from "../../testkit/private-postgres.ts";
import { processorEnv } from "../../testkit/processor.ts";
import { startProcessorSim, type ProcessorSim } from "../../testkit/processor-sim.ts";
import { startEntrypoint, type Child, type Service } from "../../testkit/processes.ts";
import type { SimFaultRule } from "../../dev/processor-sim/types.ts";
import { chaosChild, hardKill, LOG_DIR, startRelay } from "../lib/harness.ts";
import { cuttableLink } from "../lib/tcp-cut.ts";
import { SubscriberDeliveries } from "./deliveries.ts";
import type { FaultAction } from "./nemesis.ts";
import type { Fault } from "./schedule.ts";

// The API's bound on each processor call: short, so a hang is a 504 within a try and a lease
// left by a killed API (4 × this + 5 s) ends within the run.
const PROCESSOR_TIMEOUT_MS = 800;
// The proxy's losses when no cut is on: answers dropped after the server answered, connections
// reset mid-request, answers held back, its own 503s.
const LOSSES = { drop: 0.1, reset: 0.03, delay: 0.02, unavailable: 0.02 } as const;
const HELD_ANSWER_MS = 2000;
// The processor's faults as the nemesis turns them on: a 500 after the effect on some calls, a
// hang past the API's bound on some, and down (connections refused).
const PROCESSOR_RULES: Record<"processor-500-after" | "processor-hang" | "processor-down", SimFaultRule> = {
  "processor-down": { kind: "refuse" },
  "processor-hang": { kind: "hang", probability: 0.5 },
  "processor-500-after": { kind: "500-after", probability: 0.3 },
};

export interface System {
  readonly db: ScratchDatabase;
  readonly broker: PrivateBroker;
  readonly sim: ProcessorSim;
  readonly proxy: FaultProxy;
  readonly subscriber: SubscriberDeliveries;
  readonly prefix: string;
  readonly actions: Record<Fault, FaultAction>;
  close(): Promise<void>;
}

export async function startSystem(seed: number): Promise<System> {
  const pg = await privatePostgres((line) => appendFileSync(join(LOG_DIR, "postgres.log"), `${line}\n`));
  const broker = await privateMosquitto("max_queued_messages 0");
  const sim = await startProcessorSim();
  const db = await createScratchDatabase(pg.url, scratchName("chaos", "history"), { migrate: false, applicationName: "chaos-history" });
  const prefix = `history-${seed}-${crypto.randomUUID().slice(0, 8)}`;
  const env = { DATABASE_URL: db.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: prefix, API_POOL_SIZE: "8", ...authEnv(), ...processorEnv(sim, PROCESSOR_TIMEOUT_MS) };
  const apis: Service[] = [];
  for (const name of ["api-a", "api-b"]) apis.push(await startEntrypoint("api", chaosChild(name, env)));
  // The relay reaches the broker through a link the network cut cuts silently.
  const relayLink = await cuttableLink(broker.port);
  const relayBroker = `mqtt://127.0.0.1:${relayLink.port}`;
  let relay: Child = await startRelay(db.url, prefix, relayBroker, processorEnv(sim, PROCESSOR_TIMEOUT_MS));
  const subscriber = new SubscriberDeliveries({ DATABASE_URL: db.url, MQTT_URL: broker.url, MQTT_TOPIC_PREFIX: prefix }, `history-${seed}`);
  await subscriber.start();
  const cut = { on: false };
  const lossy = sharesDecider(LOSSES, seeded(seed ^ 0x5eed));
  const cutFate = seeded(seed ^ 0xc07);
  const decide = (): Fate => (cut.on ? (cutFate() < 0.5 ? "reset" : "drop") : lossy());
  const proxy = await startFaultProxy({ upstreams: apis.map((a) => a.port), decide, delayMs: HELD_ANSWER_MS });
  const processor = new Set<keyof typeof PROCESSOR_RULES>();
  const applyProcessor = async (): Promise<void> => {
    const rules = (["processor-down", "processor-hang", "processor-500-after"] as const).filter((f) => processor.has(f)).map((f) => PROCESSOR_RULES[f]);
    if (rules.length === 0) sim.clearFaults();
    else sim.setFaults({ rules });
    await sim.settled();
  };
  const processorFault = (f: keyof typeof PROCESSOR_RULES): FaultAction => ({
    start: () => (processor.add(f), applyProcessor()),
    heal: () => (processor.delete(f), applyProcessor()),
  });
  let nextApi = 0;
  let killedApi = 0;
  const actions: Record<Fault, FaultAction> = {
    "kill-api": {
      start: async () => {
        killedApi = nextApi++ % apis.length;
        await hardKill(apis[killedApi]!.child);
      },
      heal: async () => {
        const old = apis[killedApi]!;
        if (!old.child.exited) return;
        apis[killedApi] = await startEntrypoint("api", { ...chaosChild(killedApi === 0 ? "api-a" : "api-b", env), port: old.port });
      },
    },
    "kill-relay": {
      start: () => hardKill(relay),
      heal: async () => {
        if (relay.exited) relay = await startRelay(db.url, prefix, relayBroker, processorEnv(sim, PROCESSOR_TIMEOUT_MS));
      },
    },
    "kill-subscriber": { start: () => subscriber.kill(), heal: async () => (subscriber.running ? undefined : subscriber.start()) },
    "restart-broker": { start: () => broker.stop(), heal: () => broker.start() },
    "restart-postgres": { start: () => pg.stopImmediately(), heal: () => pg.start() },
    // Clients lose their requests' answers or their connections; the relay's publishes vanish.
    "cut-network": {
      start: async () => {
        cut.on = true;
        relayLink.cut();
      },
      heal: async () => {
        cut.on = false;
        relayLink.heal();
      },
    },
    "processor-500-after": processorFault("processor-500-after"),
    "processor-hang": processorFault("processor-hang"),
    "processor-down": processorFault("processor-down"),
  };
  const close = async (): Promise<void> => {
    await proxy.close();
    await relayLink.close();
    await subscriber.stop();
    await relay.stop(5000);
    for (const api of apis) await api.child.stop(5000);
    await sim.stop();
    await db.sql.end({ timeout: 2 });
    await broker.stop();
    await pg.remove();
  };
  return { db, broker, sim, proxy, subscriber, prefix, actions, close };
}

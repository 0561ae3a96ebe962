// The system under the history run, all of it private to the run: a Postgres (the embedded
// one, its own cluster and port) and a Mosquitto (persistence on, no queue limit), the
// processor simulator in this process, two `bun api.ts` behind the lossy fault proxy, two relays
// (each runs the completer) reaching the broker through a link that can be cut, the reference
// subscriber; and what the nemesis does to each.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { authEnv } from "../../testkit/auth.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../../testkit/database.ts";
import { seeded, sharesDecider, startFaultProxy, type Fate, type FaultProxy } from "../../testkit/http-fault-proxy.ts";
import { privateMosquitto, type PrivateBroker } from "../../testkit/mosquitto.ts";
import { privatePostgres, type PrivatePostgres } from "../../testkit/private-postgres.ts";
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
  // The relay reaches the broker through a link the network cut cuts silently.
  const relayLink = await cuttableLink(broker.port);
  const processes = await Processes.start(db.url, prefix, broker.url, `mqtt://127.0.0.1:${relayLink.port}`, processorEnv(sim, PROCESSOR_TIMEOUT_MS));
  const subscriber = new SubscriberDeliveries({ databaseUrl: db.url, mqttUrl: broker.url, prefix, consumer: `history-${seed}` });
  await subscriber.start();
  const cut = { on: false };
  const lossy = sharesDecider(LOSSES, seeded(seed ^ 0x5eed));
  const cutFate = seeded(seed ^ 0xc07);
  const decide = (): Fate => (cut.on ? (cutFate() < 0.5 ? "reset" : "drop") : lossy());
  const proxy = await startFaultProxy({ upstreams: processes.apiPorts, decide, delayMs: HELD_ANSWER_MS });
  const actions = faultActions({ processes, subscriber, broker, pg, sim, cut: (on) => ((cut.on = on), on ? relayLink.cut() : relayLink.heal()) });
  const close = async (): Promise<void> => {
    await proxy.close();
    await relayLink.close();
    await subscriber.stop();
    await processes.stop();
    await sim.stop();
    await db.sql.end({ timeout: 2 });
    await broker.stop();
    await pg.remove();
  };
  return { db, broker, sim, proxy, subscriber, prefix, actions, close };
}

/**
 * The two APIs (each restarted on its port) and two relays, as a deployment that keeps one up
 * while the other restarts (each runs the completer; they share the outbox by row locks).
 */
class Processes {
  private constructor(
    private readonly apis: Service[],
    private readonly relays: Child[],
    private readonly apiEnv: Record<string, string>,
    private readonly startTheRelay: () => Promise<Child>,
  ) {}

  static async start(dbUrl: string, prefix: string, brokerUrl: string, relayBrokerUrl: string, processor: Record<string, string>): Promise<Processes> {
    const apiEnv = { DATABASE_URL: dbUrl, MQTT_URL: brokerUrl, MQTT_TOPIC_PREFIX: prefix, API_POOL_SIZE: "8", ...authEnv(), ...processor };
    const apis: Service[] = [];
    for (const name of API_NAMES) apis.push(await startEntrypoint("api", chaosChild(name, apiEnv)));
    const startTheRelay = (): Promise<Child> => startRelay(dbUrl, prefix, relayBrokerUrl, processor);
    const relays: Child[] = [];
    for (let i = 0; i < RELAYS; i++) relays.push(await startTheRelay());
    return new Processes(apis, relays, apiEnv, startTheRelay);
  }

  get apiPorts(): number[] {
    return this.apis.map((a) => a.port);
  }

  killApi(i: number): Promise<void> {
    return hardKill(this.apis[i]!.child);
  }

  /** Starts API `i` again on its port, unless it runs. */
  async restartApi(i: number): Promise<void> {
    const old = this.apis[i]!;
    if (old.child.exited) this.apis[i] = await startEntrypoint("api", { ...chaosChild(API_NAMES[i]!, this.apiEnv), port: old.port });
  }

  killRelay(i: number): Promise<void> {
    return hardKill(this.relays[i]!);
  }

  async restartRelay(i: number): Promise<void> {
    if (this.relays[i]!.exited) this.relays[i] = await this.startTheRelay();
  }

  async stop(): Promise<void> {
    for (const relay of this.relays) await relay.stop(5000);
    for (const api of this.apis) await api.child.stop(5000);
  }
}

const API_NAMES = ["api-a", "api-b"] as const;
const RELAYS = 2;

interface Targets {
  readonly processes: Processes;
  readonly subscriber: SubscriberDeliveries;
  readonly broker: PrivateBroker;
  readonly pg: PrivatePostgres;
  readonly sim: ProcessorSim;
  /** Turns the network cut on or off: the clients' proxy and the relay's link. */
  readonly cut: (on: boolean) => void;
}

/** What each fault does when its window begins, and how it is healed. */
function faultActions(t: Targets): Record<Fault, FaultAction> {
  let nextApi = 0;
  let killedApi = 0;
  let nextRelay = 0;
  let killedRelay = 0;
  const processorFaults = new Set<keyof typeof PROCESSOR_RULES>();
  const applyProcessor = async (): Promise<void> => {
    const rules = (["processor-down", "processor-hang", "processor-500-after"] as const).filter((f) => processorFaults.has(f)).map((f) => PROCESSOR_RULES[f]);
    if (rules.length === 0) t.sim.clearFaults();
    else t.sim.setFaults({ rules });
    await t.sim.settled();
  };
  const processor = (f: keyof typeof PROCESSOR_RULES): FaultAction => ({
    start: () => (processorFaults.add(f), applyProcessor()),
    heal: () => (processorFaults.delete(f), applyProcessor()),
  });
  return {
    "kill-api": { start: () => t.processes.killApi((killedApi = nextApi++ % API_NAMES.length)), heal: () => t.processes.restartApi(killedApi) },
    "kill-relay": { start: () => t.processes.killRelay((killedRelay = nextRelay++ % RELAYS)), heal: () => t.processes.restartRelay(killedRelay) },
    "kill-subscriber": { start: () => t.subscriber.kill(), heal: async () => (t.subscriber.running ? undefined : t.subscriber.start()) },
    "restart-broker": { start: () => t.broker.stop(), heal: () => t.broker.start() },
    "restart-postgres": { start: () => t.pg.stopImmediately(), heal: () => t.pg.start() },
    // Clients lose their requests' answers or their connections; the relay's publishes vanish.
    "cut-network": { start: async () => t.cut(true), heal: async () => t.cut(false) },
    "processor-500-after": processor("processor-500-after"),
    "processor-hang": processor("processor-hang"),
    "processor-down": processor("processor-down"),
  };
}

// A 3-node NATS cluster of our own with MQTT and JetStream on, from Debian's `nats-server`
// (2.9): a cluster that keeps MQTT sessions and QoS 1 messages cluster-wide (in JetStream,
// replicated on the three nodes), so a client that loses its node finds its session on
// another. Each node has its own ports (client, cluster routes, MQTT, HTTP monitoring), all
// free loopback ones (the machine may run a NATS server of its own on 4222), its own config
// and JetStream store in a temp folder. NATS's MQTT speaks 3.1.1 only (QoS 0 and 1): the
// processes' MQTT_PROTOCOL_VERSION=auto falls back to it.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePorts } from "../dev/ports.ts";
import type { BrokerCluster, BrokerNode } from "./broker-cluster.ts";
import { acceptsTcp, spawnChild, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// Debian's package installs it outside a normal user's PATH.
const DEBIAN_BINARY = "/usr/sbin/nats-server";
const NODES = 3;
// A new cluster's JetStream elects its meta leader within seconds; a loaded machine gets margin.
const READY_TIMEOUT_MS = 30_000;
// SIGTERM: a node leaves the cluster and flushes its store.
const STOP_TIMEOUT_MS = 5000;
// A health probe that does not answer in this time counts as "not yet".
const PROBE_TIMEOUT_MS = 1000;

/** The nats-server binary, or undefined when it is not installed. */
export function natsServerBinary(): string | undefined {
  return Bun.which("nats-server") ?? (existsSync(DEBIAN_BINARY) ? DEBIAN_BINARY : undefined);
}

/** Why a NATS cluster cannot be started here, for a skip line; undefined when it can. */
export function natsMissing(): string | undefined {
  return natsServerBinary() === undefined ? "`nats-server` is not installed (apt-get install -y nats-server; .ci/run installs it)" : undefined;
}

export type NatsNode = BrokerNode;

export interface NatsCluster extends BrokerCluster {
  /** The nodes' HTTP monitoring (/healthz, /jsz, /connz), n1 first. */
  readonly monitorUrls: readonly string[];
  /**
   * Until, as node `via` sees them, every stream (the MQTT sessions and messages) has a leader
   * and all its replicas current: a restarted node has caught up. NATS
   * 2.9's restarted replica of a stream catches up only while the stream is quiet (under a steady
   * publish rate its lag grows for good): pause the writers meanwhile.
   */
  caughtUp(via: number, timeoutMs?: number): Promise<void>;
}

interface Ports {
  readonly client: number;
  readonly route: number;
  readonly mqtt: number;
  readonly http: number;
}

/** Three nodes, started, routed to each other, each healthy (JetStream current) before it resolves. */
export async function natsCluster(): Promise<NatsCluster> {
  const binary = natsServerBinary();
  if (binary === undefined) throw new Error(`a NATS cluster needs ${natsMissing()}`);
  const dir = mkdtempSync(join(tmpdir(), "testkit-nats-"));
  const ports = await freePorts(NODES * 4);
  const all: Ports[] = Array.from({ length: NODES }, (_, i) => ({
    client: ports[i * 4]!,
    route: ports[i * 4 + 1]!,
    mqtt: ports[i * 4 + 2]!,
    http: ports[i * 4 + 3]!,
  }));
  const cluster = `testkit-${crypto.randomUUID().slice(0, 8)}`;
  const nodes = all.map((own, i) => natsNode(binary, dir, `n${i + 1}`, own, all, cluster));
  const allHealthy = (timeoutMs = READY_TIMEOUT_MS): Promise<void> =>
    Promise.all(all.map((own, i) => waitUntil(() => healthy(own.http), timeoutMs, `nats-server n${i + 1} healthy`, 100))).then(() => {});
  try {
    await Promise.all(nodes.map((n) => n.start()));
    // A new cluster: every node's JetStream in contact with a meta leader before the first client.
    await allHealthy();
  } catch (error) {
    await Promise.all(nodes.map((n) => n.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    kind: "nats",
    nodes,
    mqttUrls: nodes.map((n) => n.mqttUrl),
    monitorUrls: all.map((p) => `http://127.0.0.1:${p.http}`),
    output: () => nodes.map((n) => `${n.name}: ${n.output()}`).join("\n"),
    caughtUp: (via, timeoutMs = READY_TIMEOUT_MS) =>
      waitUntil(() => streamsCurrent(all[via]!.http), timeoutMs, "every stream's replicas current", 200).then(() => {}),
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function natsNode(binary: string, dir: string, name: string, own: Ports, all: readonly Ports[], cluster: string): NatsNode & { stop(): Promise<void>; output(): string } {
  const config = join(dir, `${name}.conf`);
  const store = join(dir, name);
  mkdirSync(store);
  const routes = all.map((p) => `nats://127.0.0.1:${p.route}`).join(", ");
  writeFileSync(config, [
    // MQTT needs a server_name, and JetStream for its sessions and QoS 1 messages.
    `server_name: ${name}`,
    `listen: 127.0.0.1:${own.client}`,
    `http: 127.0.0.1:${own.http}`,
    `jetstream { store_dir: "${store}" }`,
    `cluster { name: ${cluster}, listen: 127.0.0.1:${own.route}, routes: [${routes}] }`,
    `mqtt { listen: 127.0.0.1:${own.mqtt} }`,
  ].join("\n"));
  let child: Child | undefined;
  const node = {
    name,
    mqttUrl: `mqtt://127.0.0.1:${own.mqtt}`,
    get running() {
      return child !== undefined && !child.exited;
    },
    async start() {
      const started = spawnChild([binary, "-c", config], { name: `nats-server ${name}` });
      child = started;
      await waitUntil(() => {
        if (started.exited) throw new Error(`nats-server ${name} exited with ${started.exitCode}: ${started.output()}`);
        return acceptsTcp(own.mqtt);
      }, READY_TIMEOUT_MS, `nats-server ${name} taking MQTT connections`, 100);
    },
    async kill() {
      if (!child || child.exited) return;
      child.kill("SIGKILL");
      await child.done;
    },
    async stop() {
      if (child && !child.exited) await child.stop(STOP_TIMEOUT_MS);
    },
    output: () => child?.output() ?? "",
  };
  return node;
}

/** /healthz answers 200 once the server (and its JetStream, clustered) is ready. */
async function healthy(httpPort: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${httpPort}/healthz`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    return response.ok;
  } catch {
    return false;
  }
}

interface Jsz {
  readonly account_details?: readonly { readonly stream_detail?: readonly { readonly name?: string; readonly cluster?: { readonly leader?: string; readonly replicas?: readonly { readonly current?: boolean }[] } }[] }[];
}

// The retained messages' stream: nothing here publishes a retained message, and 2.9 leaves a
// restarted node's replica of it "not current" for good.
const RETAINED = "$MQTT_rmsgs";

/** Every stream (but RETAINED) has a leader and every replica current, as the node on `httpPort` sees them. */
async function streamsCurrent(httpPort: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${httpPort}/jsz?accounts=true&streams=true`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    const streams = ((await response.json()) as Jsz).account_details?.flatMap((a) => a.stream_detail ?? []) ?? [];
    return streams.length > 0 && streams.every((s) => s.name === RETAINED || (s.cluster?.leader !== undefined && (s.cluster.replicas ?? []).every((r) => r.current === true)));
  } catch {
    return false;
  }
}

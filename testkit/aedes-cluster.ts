// A 3-node MQTT broker cluster of our own, from npm: three aedes processes
// (testkit/aedes-node.ts), each on its own loopback port, sharing a private Redis for their
// sessions, subscriptions and queued QoS 1 messages (aedes-persistence-redis) and for the
// messages that cross from one node to another (mqemitter-redis). A node holds no state of its
// own: a QoS 1 message is queued in Redis for every persistent session it matches before its
// publisher gets the PUBACK (aedes-node.ts sees to that: aedes itself answers first), so a
// client that loses its node finds its session, and whatever it had not acknowledged, on another. The Redis is a `redis-server` of its own on a free port
// (no keys left on the machine's, no other work's keys seen), not persisted: it is not the
// node a test kills. aedes speaks MQTT 3.1.1 only: the processes' MQTT_PROTOCOL_VERSION=auto
// falls back to it.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePorts } from "../dev/ports.ts";
import type { BrokerCluster, BrokerNode } from "./broker-cluster.ts";
import { acceptsTcp, spawnChild, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// Debian's redis-server package installs it here (and on PATH).
const DEBIAN_REDIS = "/usr/bin/redis-server";
const NODES = 3;
// Redis and a bun process start in well under a second; a loaded 2-core machine gets margin.
const READY_TIMEOUT_MS = 20_000;
// SIGTERM: a node closes its clients; Redis exits at once (nothing to save).
const STOP_TIMEOUT_MS = 5000;

/** The redis-server binary, or undefined when it is not installed. */
export function redisServerBinary(): string | undefined {
  return Bun.which("redis-server") ?? (existsSync(DEBIAN_REDIS) ? DEBIAN_REDIS : undefined);
}

/** Why an aedes cluster cannot be started here, for a skip line; undefined when it can. */
export function aedesClusterMissing(): string | undefined {
  return redisServerBinary() === undefined ? "`redis-server` is not installed (apt-get install -y redis-server; .ci/run installs it)" : undefined;
}

export interface AedesCluster extends BrokerCluster {
  /** The shared Redis: redis://127.0.0.1:<port>. */
  readonly redisUrl: string;
  /** A signal to the shared Redis: SIGSTOP freezes it (every node's next step waits on it), SIGCONT thaws it. */
  signalRedis(signal: NodeJS.Signals): void;
}

/** Redis, then three nodes on it, each taking MQTT connections before it resolves. */
export async function aedesCluster(): Promise<AedesCluster> {
  const binary = redisServerBinary();
  if (binary === undefined) throw new Error(`an aedes cluster needs ${aedesClusterMissing()}`);
  const dir = mkdtempSync(join(tmpdir(), "testkit-aedes-"));
  // Held open together, so none is handed out twice.
  const ports = await freePorts(NODES + 1);
  const redisPort = ports[0]!;
  const redis = spawnChild([binary, "--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { name: "redis-server", stdout: "tail" });
  const nodes: AedesNode[] = [];
  try {
    await waitUntil(() => {
      if (redis.exited) throw new Error(`redis-server exited with ${redis.exitCode}: ${redis.output()}`);
      return acceptsTcp(redisPort);
    }, READY_TIMEOUT_MS, "redis-server taking connections", 50);
    nodes.push(...ports.slice(1).map((port, i) => aedesNode(`n${i + 1}`, port, redisPort)));
    await Promise.all(nodes.map((n) => n.start()));
  } catch (error) {
    await Promise.all(nodes.map((n) => n.kill()));
    await redis.stop(STOP_TIMEOUT_MS);
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    kind: "aedes",
    nodes,
    mqttUrls: nodes.map((n) => n.mqttUrl),
    redisUrl: `redis://127.0.0.1:${redisPort}`,
    signalRedis: (signal) => redis.kill(signal),
    output: () => [...nodes.map((n) => `${n.name}: ${n.output()}`), `redis: ${redis.output()}`].join("\n"),
    // Nothing to catch up: a node started again reads what it needs from Redis as clients come.
    caughtUp: () => Promise.resolve(),
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
      await redis.stop(STOP_TIMEOUT_MS);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface AedesNode extends BrokerNode {
  stop(): Promise<void>;
  output(): string;
}

function aedesNode(name: string, mqttPort: number, redisPort: number): AedesNode {
  let child: Child | undefined;
  return {
    name,
    mqttUrl: `mqtt://127.0.0.1:${mqttPort}`,
    get running() {
      return child !== undefined && !child.exited;
    },
    async start() {
      let ready = false;
      const started = spawnChild(["bun", "testkit/aedes-node.ts", String(mqttPort), String(redisPort)], {
        name: `aedes ${name}`,
        stdout: (line) => {
          if (line.trim() === "ready") ready = true;
        },
      });
      child = started;
      await waitUntil(() => {
        if (started.exited) throw new Error(`aedes ${name} exited with ${started.exitCode}: ${started.output()}`);
        return ready;
      }, READY_TIMEOUT_MS, `aedes ${name} taking MQTT connections`, 50);
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
}

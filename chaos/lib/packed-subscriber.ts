// A subscriber on the packed library, run by node from a scratch project that installed the
// tarball (testkit/package.ts): test/fixtures/subscriber-node.mjs, whose handler writes one
// row per event in `consumed` of its own database. Told KILL_AT and KILL_AFTER, it stops dead
// at that event (its row written but not committed, or committed but not acknowledged) and
// says so; this harness SIGKILLs it there.
import { join } from "node:path";
import { placeProgram, type Installed } from "../../testkit/package.ts";
import { ROOT, spawnChild, type Child } from "../../testkit/processes.ts";
import { waitUntil } from "../../testkit/wait.ts";
import { chaosChild } from "./harness.ts";

export type KillPoint = "written" | "committed" | "none";

export interface PackedSubscriberEnv {
  readonly databaseUrl: string;
  readonly mqttUrl: string;
  readonly prefix: string;
  readonly consumer: string;
  readonly apiUrl: string;
  readonly apiToken: string;
}

export interface PackedRun {
  readonly child: Child;
  /** Resolves with the kill point once it was SIGKILLed there; never for KILL_AT=none. */
  readonly killed: Promise<KillPoint>;
  readonly lines: readonly Record<string, unknown>[];
}

/** Starts one incarnation; resolves once it subscribed. */
export async function startPacked(installed: Installed, env: PackedSubscriberEnv, killAt: KillPoint, killAfter: number): Promise<PackedRun> {
  const program = await placeProgram(installed, join(ROOT, "test/fixtures/subscriber-node.mjs"), "subscriber.mjs");
  const lines: Record<string, unknown>[] = [];
  let onKilled: (point: KillPoint) => void = () => {};
  const killed = new Promise<KillPoint>((resolve) => (onKilled = resolve));
  let child: Child | undefined;
  const vars = {
    DATABASE_URL: env.databaseUrl,
    MQTT_URL: env.mqttUrl,
    PREFIX: env.prefix,
    CONSUMER: env.consumer,
    API_URL: env.apiUrl,
    API_TOKEN: env.apiToken,
    KILL_AT: killAt,
    KILL_AFTER: String(killAfter),
  };
  child = spawnChild(["node", program], {
    ...chaosChild("packed-subscriber", vars),
    cwd: installed.dir,
    stdout: (text) => {
      const line = JSON.parse(text) as Record<string, unknown>;
      lines.push(line);
      // The process stands still at its kill point: killed there, before it can go on.
      if (line.at === "written" || line.at === "committed") {
        child?.kill("SIGKILL");
        onKilled(line.at);
      }
    },
  });
  const started = child;
  await waitUntil(() => {
    if (started.exited && !lines.some((l) => l.at)) throw new Error(`the packed subscriber exited with ${started.exitCode}: ${started.output()}`);
    return lines.some((l) => l.event === "ready" || l.at);
  }, 30_000, "the packed subscriber subscribed");
  return { child: started, killed, lines };
}

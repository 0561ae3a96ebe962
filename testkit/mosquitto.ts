// A Mosquitto of our own, for tests and chaos scenarios that stop the broker or configure
// it (an ACL): its own port, config and persistence directory, so the machine's broker
// stays up for everyone else.
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../dev/ports.ts";
import { acceptsTcp, spawnChild, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// Mosquitto listens within milliseconds; a loaded machine gets margin.
const START_TIMEOUT_MS = 10_000;
// SIGTERM makes it write its persistence file first; this is ample for a test's sessions.
const STOP_TIMEOUT_MS = 5000;

export interface PrivateBroker {
  readonly url: string;
  readonly port: number;
  /** Its config and persistence directory (mosquitto.db once it saved). */
  readonly dir: string;
  /** Starts it again on the same port, with the sessions and messages it saved. */
  start(): Promise<void>;
  /** SIGTERM: Mosquitto saves its sessions and queued messages, then exits. */
  stop(): Promise<void>;
  /** A signal to the running broker: SIGSTOP freezes it, SIGCONT thaws it, SIGUSR1 makes it save its persistence file. */
  signal(signal: NodeJS.Signals): void;
  /** SIGKILL (a frozen broker too): it exits without saving; resolves once it is gone. */
  kill(): Promise<void>;
}

export function mosquittoInstalled(): boolean {
  return Bun.which("mosquitto") !== null;
}

/** A directory Mosquitto can use: started as root it drops to its own user. */
export function brokerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "testkit-mosquitto-"));
  chmodSync(dir, 0o777);
  return dir;
}

/**
 * Started on a free port, with persistence so sessions survive a restart. `extraConfig`
 * lines are appended (e.g. "max_queued_messages 0"); `dir` (from brokerDir()) may hold
 * files they name.
 */
export async function privateMosquitto(extraConfig = "", dir = brokerDir()): Promise<PrivateBroker> {
  // Neither the embedded services nor Docker stand in: the caller stops, freezes or configures this broker.
  if (!mosquittoInstalled()) throw new Error("a private broker needs `mosquitto` on PATH (e.g. apt-get install mosquitto)");
  const port = await freePort();
  const config = join(dir, "mosquitto.conf");
  writeFileSync(config, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${dir}/\n${extraConfig}\n`);
  let child: Child | undefined;
  const broker: PrivateBroker = {
    url: `mqtt://127.0.0.1:${port}`,
    port,
    dir,
    async start() {
      const started = spawnChild(["mosquitto", "-c", config], { name: `mosquitto :${port}` });
      child = started;
      await waitUntil(
        () => {
          if (started.exited) throw new Error(`mosquitto exited with ${started.exitCode}: ${started.output()}`);
          return acceptsTcp(port);
        },
        START_TIMEOUT_MS,
        `mosquitto on :${port}`,
      );
    },
    async stop() {
      if (!child || child.exited) return;
      await child.stop(STOP_TIMEOUT_MS);
    },
    signal(signal) {
      if (child && !child.exited) child.kill(signal);
    },
    async kill() {
      if (!child || child.exited) return;
      child.kill("SIGKILL");
      await child.done;
    },
  };
  await broker.start();
  return broker;
}

/**
 * A broker that never drops a slow subscriber's messages, for tests that drain thousands of
 * rows at full speed into one collector: Mosquitto keeps at most 1000 messages queued per
 * client by default and drops the rest, which is the broker's limit, not the relay's. A
 * private Mosquitto with no queue limit when one is installed, else `fallbackUrl` as it is.
 */
export async function unboundedBroker(fallbackUrl: string): Promise<{ readonly url: string; stop(): Promise<void> }> {
  if (!mosquittoInstalled()) return { url: fallbackUrl, stop: async () => {} };
  return privateMosquitto("max_queued_messages 0");
}

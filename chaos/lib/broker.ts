// A private Mosquitto for the scenarios that stop the broker: its own port, config and
// persistence directory, so the machine's broker stays up for everyone else.
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, sleep, spawnCmd, until, type Child } from "./harness.ts";

export interface PrivateBroker {
  readonly url: string;
  readonly port: number;
  /** Graceful stop (SIGTERM: Mosquitto writes its persistence file), then start again on the same port. */
  stop(): Promise<void>;
  start(): Promise<void>;
}

async function accepts(port: number): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    socket.end();
    return true;
  } catch {
    return false;
  }
}

export async function privateBroker(): Promise<PrivateBroker> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "chaos-mosquitto-"));
  // Mosquitto started as root drops to its own user, which must be able to write the persistence file.
  chmodSync(dir, 0o777);
  const conf = join(dir, "mosquitto.conf");
  writeFileSync(conf, [
    `listener ${port} 127.0.0.1`,
    "allow_anonymous true",
    "persistence true",
    `persistence_location ${dir}/`,
    // The subscriber's session queue must not overflow during the scenario: no drop by the broker.
    "max_queued_messages 100000",
    "",
  ].join("\n"));
  let child: Child | undefined;
  const broker: PrivateBroker = {
    url: `mqtt://127.0.0.1:${port}`,
    port,
    async start() {
      child = spawnCmd("mosquitto", ["mosquitto", "-c", conf], {});
      const c = child;
      await until(`mosquitto on :${port}`, 10_000, async () => {
        if (c.exited) throw new Error(`mosquitto exited with ${c.proc.exitCode} (port ${port})`);
        return accepts(port);
      }, 50);
    },
    async stop() {
      const c = child;
      if (!c) return;
      c.kill("SIGTERM");
      await Promise.race([c.proc.exited, sleep(5000)]);
      c.kill("SIGKILL");
      await until(`port ${port} to close`, 5000, async () => !(await accepts(port)), 50);
    },
  };
  await broker.start();
  return broker;
}

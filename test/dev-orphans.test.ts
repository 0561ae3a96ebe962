// `bun run dev` killed outright (SIGKILL: no handler of its own runs): api, relay and subscriber,
// which run in process groups of their own so that a terminal's Ctrl-C reaches only the
// supervisor, are stopped anyway by its watchdog (dev/watchdog.ts stopWithSupervisor).
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { freePort } from "../dev/ports.ts";
import { alive } from "../dev/start-lock.ts";
import { spawnChild } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

// dev.ts starts three processes: api, relay, subscriber.
const CHILDREN = 3;
// The watchdog polls every 0.5 s; the children then finish what is in flight and exit.
const ORPHANS_GONE_MS = 15_000;

const db = await freshDatabase("dev_orphans");
const { mqttUrl } = await services();
afterAll(() => db.drop());

/** The pids whose parent is `pid`, from /proc. */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (parent === pid) found.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

test.skipIf(process.platform === "win32")("SIGKILL of bun run dev: its api, relay and subscriber exit too", async () => {
  const apiPort = await freePort();
  const dev = spawnChild(["bun", "dev.ts"], {
    name: "dev",
    env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, PORT: String(apiPort), RELAY_PORT: String(await freePort()), MQTT_TOPIC_PREFIX: `test/${crypto.randomUUID()}/` },
    stdout: "tail",
  });
  await waitUntil(async () => (await fetch(`http://127.0.0.1:${apiPort}/readyz`).catch(() => undefined))?.status === 200, 30_000, "dev mode's api to be ready");
  // The watchdog shells are children too: the three bun processes are the ones to watch (the
  // subscriber starts once the api is ready).
  const bunKids = (): number[] => childrenOf(dev.pid).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(".ts"));
  const bunChildren = await waitUntil(() => (bunKids().length >= CHILDREN ? bunKids() : undefined), 10_000, "dev mode's subscriber to start");
  expect(bunChildren).toHaveLength(CHILDREN);

  dev.kill("SIGKILL");
  await dev.done;
  await waitUntil(() => bunChildren.every((pid) => !alive(pid)), ORPHANS_GONE_MS, "api, relay and subscriber to exit");
});

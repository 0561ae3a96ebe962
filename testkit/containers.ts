// The Testcontainers path: used when no DATABASE_URL/MQTT_URL is given and a Docker engine
// answers with the images at hand (TEST_SERVICES=docker forces it). The images are settings:
// TEST_POSTGRES_IMAGE and TEST_MQTT_IMAGE, the official ones by default; where no registry is
// reachable, `bun run test:images` builds both from Debian packages (testkit/images/build.sh).
// Ryuk is not used (its image cannot be pulled everywhere: TESTCONTAINERS_RYUK_DISABLED=true):
// every container and network the kit starts carries this process's labels, a detached reaper
// (container-reaper.ts) removes them once this process is gone, however it ended, and each
// process sweeps at its start what a dead owner left (a reaper killed with it).
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import type { ContainerRuntimeClient, StartedTestContainer } from "testcontainers";
import { within } from "./wait.ts";

const DOCKER_SOCKET = "/var/run/docker.sock";
// A Docker engine that has not answered a ping in this time is treated as absent.
const DOCKER_PING_TIMEOUT_MS = 2000;
// A missing image is pulled; a registry that takes connections and never answers must not hang
// the run, so a pull not done in this time counts as "cannot be had". An official image pulls
// in seconds where a registry is reachable.
const IMAGE_PULL_TIMEOUT_MS = 60_000;

export const DEFAULT_POSTGRES_IMAGE = "postgres:16-alpine";
export const DEFAULT_MQTT_IMAGE = "eclipse-mosquitto:2";

/** The labels the kit puts on what it starts: the owner (host, pid, its start) and a session id. */
export const LABEL_OWNER = "org.charges-outbox.test.owner";
export const LABEL_SESSION = "org.charges-outbox.test.session";

export interface ContainerImages {
  readonly postgres: string;
  readonly mqtt: string;
}

export function containerImages(env: Record<string, string | undefined> = process.env): ContainerImages {
  return { postgres: env.TEST_POSTGRES_IMAGE || DEFAULT_POSTGRES_IMAGE, mqtt: env.TEST_MQTT_IMAGE || DEFAULT_MQTT_IMAGE };
}

async function testcontainers(): Promise<typeof import("testcontainers")> {
  // Before testcontainers reads it: Ryuk's image is one more that cannot be pulled everywhere.
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= "true";
  return import("testcontainers");
}

async function runtimeClient(): Promise<ContainerRuntimeClient> {
  return (await testcontainers()).getContainerRuntimeClient();
}

/** The engine's API client (dockerode), as Testcontainers found the engine. */
export async function dockerode(): Promise<ContainerRuntimeClient["container"]["dockerode"]> {
  return (await runtimeClient()).container.dockerode;
}

export async function dockerAnswers(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync(DOCKER_SOCKET)) return false;
  try {
    // The module first, outside the bound: loading it takes seconds on a busy machine.
    const { getContainerRuntimeClient } = await testcontainers();
    return (await within(getContainerRuntimeClient(), DOCKER_PING_TIMEOUT_MS)) !== undefined;
  } catch {
    return false;
  }
}

/** Why `image` cannot be had (not here and not pulled in time), or undefined when it is here. */
export async function imageMissing(image: string): Promise<string | undefined> {
  const client = await runtimeClient();
  const { ImageName } = await testcontainers();
  const name = ImageName.fromString(image);
  if (await client.image.exists(name)) return undefined;
  try {
    const pulled = await within(client.image.pull(name).then(() => true), IMAGE_PULL_TIMEOUT_MS);
    return pulled ? undefined : `not here, and not pulled within ${IMAGE_PULL_TIMEOUT_MS / 1000} s`;
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    return `not here, and the pull failed: ${why.split("\n")[0]?.trim()}`;
  }
}

let usable: Promise<boolean> | undefined;

/**
 * The services' probe: an engine answers and both images are here (or pulled). When the engine
 * answers but an image cannot be had, says so in one line and answers false, so the choice
 * falls through as without Docker. Once per process.
 */
export function dockerUsable(): Promise<boolean> {
  usable ??= (async () => {
    if (!(await dockerAnswers())) return false;
    const images = containerImages();
    for (const image of [images.postgres, images.mqtt]) {
      const why = await imageMissing(image);
      if (why === undefined) continue;
      console.error(`testkit: Docker answers but image ${image} cannot be had (${why}); using the services as without Docker (bun run test:images builds both here)`);
      return false;
    }
    return true;
  })();
  return usable;
}

/** This process as its labels name it: host, pid and the pid's start (so a reused pid is not taken for it). */
export function ownerLabel(pid: number = process.pid): string {
  return `${hostname()}/${pid}/${processStart(pid) ?? "?"}`;
}

/** The kernel's start time of `pid` (field 22 of /proc/<pid>/stat), where there is a /proc. */
function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/** Whether the owner a label names is still running; an owner on another host counts as alive. */
export function ownerAlive(label: string): boolean {
  const [host, pidText, start] = label.split("/");
  if (host !== hostname()) return true;
  const pid = Number(pidText);
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as { code?: string }).code !== "EPERM") return false;
  }
  return start === "?" || processStart(pid) === start;
}

let session: Promise<Record<string, string>> | undefined;

/**
 * The labels for what this process starts. The first call sweeps what dead owners left and
 * starts this process's reaper.
 */
export function sessionLabels(): Promise<Record<string, string>> {
  session ??= (async () => {
    await sweepStale();
    const labels = { [LABEL_OWNER]: ownerLabel(), [LABEL_SESSION]: crypto.randomUUID() };
    const reaper = new URL("./container-reaper.ts", import.meta.url).pathname;
    const child = spawn(process.execPath, [reaper, String(process.pid), labels[LABEL_SESSION]!], { detached: true, stdio: "ignore" });
    child.on("error", () => {});
    child.unref();
    return labels;
  })();
  return session;
}

/** Removes every container and network labelled by the kit whose owner is gone; how many containers. */
export async function sweepStale(): Promise<number> {
  const docker = await dockerode();
  const containers = await docker.listContainers({ all: true, filters: { label: [LABEL_OWNER] } });
  const stale = containers.filter((c) => !ownerAlive(c.Labels[LABEL_OWNER] ?? ""));
  await Promise.all(stale.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => {})));
  const networks = await docker.listNetworks({ filters: { label: [LABEL_OWNER] } });
  const staleNets = networks.filter((n) => !ownerAlive(n.Labels?.[LABEL_OWNER] ?? ""));
  await Promise.all(staleNets.map((n) => docker.getNetwork(n.Id).remove().catch(() => {})));
  return stale.length;
}

/** Mosquitto 2 listens on localhost only unless told otherwise; persistence as the official image. */
export const MOSQUITTO_CONF = "listener 1883 0.0.0.0\nallow_anonymous true\npersistence true\npersistence_location /mosquitto/data/\n";

/**
 * "localhost" as 127.0.0.1: the ports are published on IPv4, and a client that tries ::1 first
 * (or an engine run with --userland-proxy=false, which forwards IPv4 only) must not pay for it.
 */
function loopback(host: string): string {
  return host === "localhost" ? "127.0.0.1" : host;
}

/** Both containers, started side by side; the reaper removes them when this process ends. */
export async function startContainers(): Promise<{ adminDatabaseUrl: string; mqttUrl: string }> {
  const images = containerImages();
  for (const image of [images.postgres, images.mqtt]) {
    const why = await imageMissing(image);
    if (why !== undefined) throw new Error(`TEST_SERVICES=docker: image ${image} cannot be had (${why}); bun run test:images builds both here`);
  }
  const [pg, broker] = await Promise.all([startPostgresContainer(), startMosquittoContainer()]);
  return { adminDatabaseUrl: pg.url, mqttUrl: broker.url };
}

export interface StartedService {
  readonly container: StartedTestContainer;
  /** Reached through the port published on this host. */
  readonly url: string;
}

/** A Postgres of TEST_POSTGRES_IMAGE, labelled for the reaper; its URL may CREATE DATABASE. */
export async function startPostgresContainer(): Promise<StartedService> {
  const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
  const pg = await new PostgreSqlContainer(containerImages().postgres).withLabels(await sessionLabels()).start();
  const url = new URL(pg.getConnectionUri());
  url.hostname = loopback(pg.getHost());
  return { container: pg, url: url.href };
}

/** A Mosquitto of TEST_MQTT_IMAGE listening on every address (MOSQUITTO_CONF), labelled for the reaper. */
export async function startMosquittoContainer(): Promise<StartedService> {
  const { GenericContainer, Wait } = await testcontainers();
  const broker = await new GenericContainer(containerImages().mqtt)
    .withLabels(await sessionLabels())
    .withExposedPorts(1883)
    .withCopyContentToContainer([{ content: MOSQUITTO_CONF, target: "/mosquitto/config/mosquitto.conf" }])
    .withWaitStrategy(Wait.forLogMessage(/mosquitto version .* running/))
    .start();
  return { container: broker, url: `mqtt://${loopback(broker.getHost())}:${broker.getMappedPort(1883)}` };
}

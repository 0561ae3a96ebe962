// Where the tests find Postgres and MQTT, in this order:
//   1. DATABASE_URL / MQTT_URL when both are set (CI points them at this machine's services);
//   2. Testcontainers when a Docker engine answers with the images at hand (TEST_POSTGRES_IMAGE,
//      TEST_MQTT_IMAGE: postgres:16-alpine and eclipse-mosquitto:2 unless set; containers.ts);
//   3. otherwise "embedded": the embedded Postgres and in-process aedes broker of `bun run dev`
//      (a variable that is set is still used), so a fresh machine needs nothing installed.
// TEST_SERVICES=env|docker|embedded forces one, e.g. for CI's run of the embedded path.
// Each test file asks for its own fresh database so files can run in parallel.
// Chaos scenarios take these same services (`bun run chaos` starts the embedded ones once and
// hands them to each scenario: handedOver). Benchmarks and the smoke tests decide here too
// (processServices) but stop at Docker: figures measured on the embedded services mean nothing.
import { createScratchDatabase, scratchName, withDatabase, type ScratchDatabase } from "./database.ts";
import { dockerUsable, startContainers } from "./containers.ts";
import { startEmbedded } from "./embedded.ts";

export const SERVICE_SOURCES = ["env", "docker", "embedded"] as const;
export type ServiceSource = (typeof SERVICE_SOURCES)[number];

export interface Services {
  readonly source: ServiceSource;
  /** A database URL the tests may CREATE DATABASE from. */
  readonly adminDatabaseUrl: string;
  readonly mqttUrl: string;
  /** False on the in-process aedes broker, which speaks MQTT 3.1.1 only. */
  readonly mqtt5: boolean;
}

export interface ServiceProbe {
  readonly env: Record<string, string | undefined>;
  readonly dockerAnswers: () => Promise<boolean>;
}

/** The choice between the sources, kept pure so it can be unit-tested. */
export async function chooseSource(probe: ServiceProbe): Promise<ServiceSource> {
  const forced = probe.env.TEST_SERVICES;
  if (forced) {
    const known = SERVICE_SOURCES.find((source) => source === forced);
    if (!known) throw new Error(`TEST_SERVICES must be one of ${SERVICE_SOURCES.join(", ")}, got "${forced}"`);
    return known;
  }
  if (probe.env.DATABASE_URL && probe.env.MQTT_URL) return "env";
  if (await probe.dockerAnswers()) return "docker";
  return "embedded";
}

let cached: Promise<Services> | undefined;

export function services(): Promise<Services> {
  cached ??= resolve();
  return cached;
}

/** The services' decision as one line a command can print before it exits 1. */
export class ServicesUnavailable extends Error {}

/**
 * For benchmarks and the smoke tests, which spawn the real processes and measure them:
 * the variables, or Docker; never the embedded services (refused with one line).
 */
export async function processServices(who: string): Promise<Services> {
  const env = process.env;
  const source = await chooseSource({ env, dockerAnswers: dockerUsable });
  if (source === "embedded") {
    throw new ServicesUnavailable(`${who} needs DATABASE_URL and MQTT_URL (a server it may CREATE DATABASE on, a broker) or a Docker engine`);
  }
  return services();
}

/**
 * The variables under which a child process resolves the same services as `s`, without
 * starting anything: both URLs, the source, and TEST_MQTT5=0 for a broker that speaks
 * MQTT 3.1.1 only (the in-process aedes broker, which lives as long as this process).
 */
export function handedOver(s: Services): Record<string, string> {
  return { TEST_SERVICES: s.source, DATABASE_URL: s.adminDatabaseUrl, MQTT_URL: s.mqttUrl, TEST_MQTT5: s.mqtt5 ? "1" : "0" };
}

async function resolve(): Promise<Services> {
  const env = process.env;
  const source = await chooseSource({ env, dockerAnswers: dockerUsable });
  if (source === "env") {
    if (!env.DATABASE_URL || !env.MQTT_URL) throw new Error("TEST_SERVICES=env needs both DATABASE_URL and MQTT_URL");
    return { source, adminDatabaseUrl: env.DATABASE_URL, mqttUrl: env.MQTT_URL, mqtt5: env.TEST_MQTT5 !== "0" };
  }
  if (source === "docker") {
    // As on the embedded path, variables that are set are used: under `bun run chaos` they are
    // the containers run-all started once for every scenario (handedOver).
    if (env.DATABASE_URL && env.MQTT_URL) return { source, adminDatabaseUrl: env.DATABASE_URL, mqttUrl: env.MQTT_URL, mqtt5: env.TEST_MQTT5 !== "0" };
    return { source, ...(await startContainers()), mqtt5: true };
  }
  return { source, ...(await startEmbedded(env)) };
}

export type TestDatabase = ScratchDatabase;

/** A new database with the schema applied, for one test file. */
export async function freshDatabase(label: string): Promise<TestDatabase> {
  const { adminDatabaseUrl } = await services();
  return createScratchDatabase(adminDatabaseUrl, scratchName("t", label), { applicationName: "charges-test" });
}

export { withDatabase };

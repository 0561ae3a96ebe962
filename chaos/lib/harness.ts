// The chaos harness: the services (decided by testkit/services.ts), a fresh database per
// scenario, and the real processes (api.ts, relay.ts) spawned with testkit/processes.ts in
// their own process groups, their stderr kept in LOG_DIR for a post-mortem.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../../testkit/database.ts";
import { startEntrypoint, type Child, type Service, type SpawnOptions } from "../../testkit/processes.ts";
import { services, type Services } from "../../testkit/services.ts";
import { within } from "../../testkit/wait.ts";
import { authEnv } from "../../testkit/auth.ts";

/** One directory per scenario run for the children's stderr. */
export const LOG_DIR = mkdtempSync(join(tmpdir(), "chaos-"));

// The relay's fallback poll in the scenarios: short, so a missed wake-up costs little time.
const RELAY_POLL_MS = "250";
// A SIGKILLed process is gone within milliseconds; this only bounds a stuck wait.
const KILL_WAIT_MS = 3000;

/**
 * What `bun test` would use. Under `bun run chaos` the embedded services are run-all's, handed
 * over in the environment; a scenario run on its own starts them in its own process.
 */
export function chaosServices(): Promise<Services> {
  return services();
}

/** A new database on the services' server; the processes under test apply the schema. */
export async function freshDatabase(label: string): Promise<ScratchDatabase> {
  const { adminDatabaseUrl } = await chaosServices();
  return createScratchDatabase(adminDatabaseUrl, scratchName("chaos", label), { migrate: false, applicationName: "chaos-harness" });
}

/** Spawn options of every chaos child: its own process group, stderr to LOG_DIR/<name>-<time>.log. */
export function chaosChild(name: string, env: Record<string, string>): SpawnOptions {
  return { name, processGroup: true, stderrFile: join(LOG_DIR, `${name}-${Date.now()}.log`), env: { LOG_LEVEL: "warn", ...env } };
}

/** `bun api.ts`, with `env` added (e.g. a smaller API_POOL_SIZE where several run on a shared server). */
export async function startApi(dbUrl: string, prefix: string, port?: number, env: Record<string, string> = {}): Promise<Service> {
  const { mqttUrl } = await chaosServices();
  // Authentication on, as deployed: the API accepts the test kit's tokens (chaos/lib/client.ts).
  return startEntrypoint("api", { ...chaosChild("api", { DATABASE_URL: dbUrl, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, ...authEnv(), ...env }), port });
}

/**
 * `bun relay.ts`, with `env` added. CHAOS_RELAY_CHECKOUT runs the relay.ts of another checkout
 * instead (e.g. a worktree of an older commit), to show a scenario red against the relay it
 * was written to catch (docs/chaos.md).
 */
export async function startRelay(dbUrl: string, prefix: string, mqttUrl?: string, env: Record<string, string> = {}): Promise<Child> {
  return (await startRelayService(dbUrl, prefix, mqttUrl, env)).child;
}

/** As startRelay, with its port (its /readyz). */
export async function startRelayService(dbUrl: string, prefix: string, mqttUrl?: string, env: Record<string, string> = {}): Promise<Service> {
  const broker = mqttUrl ?? (await chaosServices()).mqttUrl;
  const vars = { DATABASE_URL: dbUrl, MQTT_URL: broker, MQTT_TOPIC_PREFIX: prefix, OUTBOX_POLL_MS: RELAY_POLL_MS, ...env };
  const cwd = process.env.CHAOS_RELAY_CHECKOUT || undefined;
  return startEntrypoint("relay", { ...chaosChild("relay", vars), cwd });
}

/** SIGKILL, and wait until it is gone. */
export async function hardKill(child: Child): Promise<void> {
  child.kill("SIGKILL");
  await within(child.done, KILL_WAIT_MS);
}

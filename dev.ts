// `bun run dev`: the whole system on one machine with nothing installed. Starts an embedded
// Postgres unless DATABASE_URL is set (data in .data/postgres, kept across runs, or in the
// temp dir when Postgres's user cannot reach the project: dev/pg-place.ts), an in-process
// MQTT broker unless MQTT_URL is set, an in-process payment-processor simulator (Stripe's
// API, dev/processor-sim/) unless PAYMENT_PROCESSOR is set, then api, relay and a printing
// subscriber.
// Ctrl-C stops the three processes first and the services they use last.
import { relative } from "node:path";
import { fileURLToPath } from "node:url";
import { killChildrenNow, startChild, stopChildren, type Child } from "./dev/children.ts";
import { DATA_DIR, startEmbeddedPostgres } from "./dev/embedded-postgres.ts";
import { startLocalBroker } from "./dev/mqtt-broker.ts";
import { banner, dataPlace, embeddedPostgresLine, print, printPostgres } from "./dev/output.ts";
import { processorEnv, startDevProcessor } from "./dev/processor.ts";
import { stopWithSupervisor } from "./dev/watchdog.ts";
import { freePort } from "./dev/ports.ts";
import { DEMO_TENANT, devSecret, DEV_KEY_HASH_SECRET_FILE, DEV_SECRET_FILE, DEV_OPERATOR, mintToken, OPERATOR_SCOPE } from "./dev/token.ts";

const ROOT = fileURLToPath(new URL("./", import.meta.url));
const DEFAULT_API_PORT = 3000;
const DEFAULT_RELAY_PORT = 9465;
// api and relay migrate and connect within a second or two; a slow first start may take longer.
const READY_TIMEOUT_MS = 30_000;
const READY_POLL_MS = 200;

interface Service {
  readonly url: string;
  readonly note: string;
  stop(): Promise<void>;
}

const log = (line: string): void => print("dev", line);
const children: Child[] = [];
const services: Service[] = [];
let stopping = false;

async function main(): Promise<void> {
  const database = await databaseService();
  services.push(database);
  const broker = await brokerService();
  services.push(broker);
  // The simulator only when the API charges through it: a PAYMENT_PROCESSOR of the
  // environment's own (none for the bare ledger, or a processor of its own) runs none.
  const processor = processorChosen() ? undefined : await processorService();
  if (processor) services.push(processor);
  const apiPort = await portFor("PORT", DEFAULT_API_PORT);
  const relayPort = await portFor("RELAY_PORT", DEFAULT_RELAY_PORT);
  const auth = authSetup();
  // Charges go through the simulator (the relay runs the completer for them).
  const charging = processor ? processorEnv(processor) : {};
  // One key for the api's and the relay's keyHash, kept in .data/: their logs name a key alike, run after run.
  const keyHashSecret = process.env.API_KEY_HASH_SECRET || devSecret(DEV_KEY_HASH_SECRET_FILE);
  const env = { ...process.env, ...auth.env, ...charging, API_KEY_HASH_SECRET: keyHashSecret, DATABASE_URL: database.url, MQTT_URL: broker.url, PORT: String(apiPort), RELAY_PORT: String(relayPort) };
  children.push(startChild("api", [`${ROOT}api.ts`], env, print));
  children.push(startChild("relay", [`${ROOT}relay.ts`], env, print));
  for (const child of children) supervise(child);
  const api = `http://127.0.0.1:${apiPort}`;
  const relay = `http://127.0.0.1:${relayPort}`;
  // The relay's /healthz, not /readyz: a relay waiting for its broker is running, and says why in its lines.
  await Promise.all([waitReady(`${api}/readyz`), waitReady(`${relay}/healthz`)]);
  // Once the API has migrated the database: the subscriber library's migrations, on the same
  // database here, then find the service's tables and take them as they are.
  const subscriber = startChild("subscriber", [subscriberScript()], env, print);
  children.push(subscriber);
  supervise(subscriber);
  const endpoints = {
    api,
    relay,
    // A URL from the environment may carry a password: the banner (dev/output.ts) masks them.
    databaseUrl: database.url,
    databaseNote: database.note,
    databaseDirectUrl: process.env.DATABASE_DIRECT_URL || undefined,
    mqttUrl: broker.url,
    mqttNote: broker.note,
    processorUrl: processor?.url,
    paymentMethod: processor ? "pm_card_visa" : undefined,
    authorization: await auth.authorization(),
    authNote: auth.note,
    consoleUrl: await consoleLink(process.env.OPERATOR_PORT ? `http://127.0.0.1:${process.env.OPERATOR_PORT}` : api, auth),
  };
  for (const line of banner(endpoints)) log(line);
}

async function databaseService(): Promise<Service> {
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, note: "(from DATABASE_URL)", stop: async () => {} };
  const started = performance.now();
  const pg = await startEmbeddedPostgres({ dataDir: `${DATA_DIR}postgres`, detached: true, log: printPostgres });
  print("postgres", embeddedPostgresLine(pg, Math.round(performance.now() - started), ROOT));
  return { url: pg.url, note: `(embedded, data in ${dataPlace(pg, ROOT)})`, stop: () => pg.stop() };
}

async function brokerService(): Promise<Service> {
  if (process.env.MQTT_URL) return { url: process.env.MQTT_URL, note: "(from MQTT_URL)", stop: async () => {} };
  const broker = await startLocalBroker();
  print("mqtt", `in-process MQTT broker (aedes, MQTT 3.1.1) on port ${broker.port}`);
  return { url: broker.url, note: "(in-process aedes)", stop: () => broker.close() };
}

function processorChosen(): boolean {
  return (process.env.PAYMENT_PROCESSOR ?? "").trim() !== "";
}

async function processorService(): Promise<Service> {
  const sim = await startDevProcessor();
  print("processor", `Stripe API simulator (PaymentIntents, Refunds) on port ${sim.port}`);
  return { url: sim.url, note: "(simulator)", stop: () => sim.stop() };
}

interface AuthSetup {
  readonly env: Record<string, string>;
  /** The Authorization header value the printed curl carries, if dev mode can mint one. */
  authorization(): Promise<string | undefined>;
  /** An operator's token for the console's sign-in link, if dev mode can mint one. */
  operatorToken(): Promise<string | undefined>;
  readonly note: string;
}

/**
 * Authentication stays on in dev mode: with no key source configured, the API gets the dev
 * secret (created once in .data/) and the banner a token for the demo tenant.
 */
function authSetup(): AuthSetup {
  const mode = (process.env.AUTH_MODE ?? "").trim().toLowerCase();
  if (mode === "none") return { env: {}, authorization: async () => undefined, operatorToken: async () => undefined, note: "AUTH_MODE=none: no token needed" };
  const configured = process.env.AUTH_JWT_SECRET;
  if (!configured && process.env.AUTH_JWKS_URL) {
    return { env: {}, authorization: async () => "Bearer <a token from your identity provider>", operatorToken: async () => undefined, note: "tokens from AUTH_JWKS_URL" };
  }
  const secret = configured || devSecret();
  const note = configured ? "a token signed with AUTH_JWT_SECRET" : `a token signed with the dev secret in ${relative(ROOT, DEV_SECRET_FILE)}`;
  const claims = { tenant: DEMO_TENANT, tenantClaim: process.env.AUTH_TENANT_CLAIM?.trim() || undefined, issuer: process.env.AUTH_ISSUER?.trim() || undefined, audience: process.env.AUTH_AUDIENCE?.trim() || undefined };
  return {
    env: { AUTH_JWT_SECRET: secret },
    authorization: async () => `Bearer ${await mintToken(secret, claims)}`,
    operatorToken: () => mintToken(secret, { ...claims, tenant: DEV_OPERATOR, scope: OPERATOR_SCOPE }),
    note: `${note}, for the tenant "${DEMO_TENANT}" (bun run token <tenant> mints others)`,
  };
}

/** The console's sign-in link (docs/console.md): it sets the session cookie and opens the console. */
async function consoleLink(base: string, auth: AuthSetup): Promise<string | undefined> {
  const token = await auth.operatorToken();
  return token === undefined ? undefined : `${base}/console/sign-in?token=${token}`;
}

/** The variable when set; otherwise the usual port, or any free one when it is taken. */
async function portFor(variable: string, preferred: number): Promise<number> {
  const configured = process.env[variable];
  if (configured) return Number(configured);
  if (!(await isTaken(preferred))) return preferred;
  const other = await freePort();
  log(`port ${preferred} is taken; using ${other} for ${variable}`);
  return other;
}

async function isTaken(port: number): Promise<boolean> {
  const { createServer } = await import("node:net");
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(true));
    server.listen(port, "0.0.0.0", () => server.close(() => resolve(false)));
  });
}

/** Stopped with the others when it exits; in its own process group, it would outlive a SIGKILLed supervisor without the watchdog. */
function supervise(child: Child): void {
  void child.exited.then((code) => onChildExit(child, code));
  if (child.process.pid !== undefined) stopWithSupervisor(process.pid, [child.process.pid]);
}

function subscriberScript(): string {
  return `${ROOT}examples/subscriber.ts`;
}

async function waitReady(url: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline && !stopping) {
    const ok = await fetch(url).then((response) => response.ok, () => false);
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
  }
  if (!stopping) throw new Error(`${url} did not answer 200 within ${READY_TIMEOUT_MS / 1000} s`);
}

function onChildExit(child: Child, code: number | string): void {
  if (stopping) return;
  log(`${child.name} exited unexpectedly (${code}); stopping everything`);
  void shutdown(1);
}

async function shutdown(exitCode: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  log("stopping api, relay and subscriber");
  await stopChildren(children);
  for (const service of services.reverse()) await service.stop().catch((error: unknown) => log(`while stopping: ${String(error)}`));
  log("stopped");
  process.exit(exitCode);
}

for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => void shutdown(0));
// Last resort when the supervisor dies some other way: no orphaned api/relay/subscriber.
process.on("exit", () => killChildrenNow(children));

main().catch(async (error: unknown) => {
  print("dev", `cannot start: ${error instanceof Error ? error.message : String(error)}`);
  await shutdown(1);
});

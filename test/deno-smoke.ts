// `bun test/deno-smoke.ts`: proves api.ts and relay.ts run unchanged on Deno. Against
// DATABASE_URL and MQTT_URL it starts both under `deno run -A` on free ports, in a fresh
// database and under a topic prefix of their own, creates a charge, replays it, and waits
// for the relay's event at an MQTT subscriber. Exit 0 with one "ok" line, or 1 with one
// "FAILED" line followed by the processes' last output.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import mqtt, { type MqttClient } from "mqtt";
import { freePort } from "../dev/ports.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
// Deno's first run resolves the npm packages and compiles: allow for a cold cache.
const READY_TIMEOUT_MS = 60_000;
const EVENT_TIMEOUT_MS = 15_000;
const POLL_MS = 200;
const STOP_TIMEOUT_MS = 10_000;
const OUTPUT_TAIL_LINES = 15;

class SmokeFailure extends Error {}

interface Proc {
  readonly name: string;
  readonly child: ChildProcess;
  readonly output: string[];
}

const procs: Proc[] = [];
const started = performance.now();

async function main(): Promise<void> {
  const databaseUrl = required("DATABASE_URL");
  const mqttUrl = required("MQTT_URL");
  const version = spawnSync("deno", ["--version"], { encoding: "utf8" });
  if (version.status !== 0) throw new SmokeFailure("deno is not installed (npm install -g deno)");
  const suffix = crypto.randomUUID().slice(0, 8);
  // The processes under test apply the schema themselves, on Deno.
  const db = await createScratchDatabase(databaseUrl, scratchName("deno", "smoke"), { migrate: false }).catch((error: Error) => {
    throw new SmokeFailure(`cannot create a database through DATABASE_URL: ${error.message}`);
  });
  try {
    await run(db.url, mqttUrl, `deno-smoke-${suffix}/`);
  } finally {
    await stopAll();
    await db.drop().catch(() => {});
  }
  console.log(`deno smoke: ok on ${version.stdout.split("\n")[0]} in ${Math.round(performance.now() - started)} ms`);
}

async function run(databaseUrl: string, mqttUrl: string, prefix: string): Promise<void> {
  const [apiPort, relayPort] = [await freePort(), await freePort()];
  const env = { ...process.env, DATABASE_URL: databaseUrl, MQTT_URL: mqttUrl, PORT: String(apiPort), RELAY_PORT: String(relayPort), MQTT_TOPIC_PREFIX: prefix };
  const subscriber = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5 }).catch((error: Error) => {
    throw new SmokeFailure(`cannot connect to MQTT_URL: ${error.message}`);
  });
  try {
    // Listening before the charge exists: the relay publishes within milliseconds of the commit.
    const event = eventSeen(subscriber);
    await subscriber.subscribeAsync(`${prefix}charges/ChargeCreated`, { qos: 1 });
    procs.push(startDeno("api", env), startDeno("relay", env));
    const api = `http://127.0.0.1:${apiPort}`;
    await Promise.all([waitReady("api", `${api}/readyz`), waitReady("relay", `http://127.0.0.1:${relayPort}/readyz`)]);
    const chargeId = await createAndReplay(api);
    await event(chargeId);
  } finally {
    await subscriber.endAsync().catch(() => {});
  }
}

function startDeno(name: "api" | "relay", env: NodeJS.ProcessEnv): Proc {
  const child = spawn("deno", ["run", "-A", `${ROOT}${name}.ts`], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  const output: string[] = [];
  const keep = (chunk: Buffer): void => {
    for (const line of chunk.toString("utf8").split("\n")) if (line.trim()) output.push(line);
    output.splice(0, Math.max(0, output.length - OUTPUT_TAIL_LINES));
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  return { name, child, output };
}

async function waitReady(name: string, url: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  const proc = procs.find((p) => p.name === name)!;
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new SmokeFailure(`${name} on Deno exited with code ${proc.child.exitCode} before it was ready`);
    if (await fetch(url).then((r) => r.ok, () => false)) return;
    await sleep(POLL_MS);
  }
  throw new SmokeFailure(`${name} on Deno did not answer 200 on ${url} within ${READY_TIMEOUT_MS / 1000} s`);
}

async function createAndReplay(api: string): Promise<string> {
  const init = {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
    body: JSON.stringify({ amountCents: 4900 }),
  };
  const first = await fetch(`${api}/charges`, init);
  const firstBody = await first.text();
  check(first.status === 201, `POST /charges answered ${first.status}, not 201: ${firstBody.slice(0, 200)}`);
  check(first.headers.get("idempotent-replayed") === null, "the first answer claims to be a replay");
  const replay = await fetch(`${api}/charges`, init);
  const replayBody = await replay.text();
  check(replay.status === first.status, `the replay answered ${replay.status}, the first ${first.status}`);
  check(replayBody === firstBody, `the replay's body differs from the first:\n  ${firstBody}\n  ${replayBody}`);
  check(replay.headers.get("idempotent-replayed") === "true", "the replay lacks Idempotent-Replayed: true");
  const id = (JSON.parse(firstBody) as { id?: string }).id;
  check(typeof id === "string", "the 201 body has no id");
  return id!;
}

/** Starts collecting events now; the returned function waits for one about the given charge. */
function eventSeen(subscriber: MqttClient): (chargeId: string) => Promise<void> {
  const seen = new Set<string>();
  let notify = (): void => {};
  subscriber.on("message", (_topic, payload) => {
    const event = JSON.parse(payload.toString("utf8")) as { type?: string; data?: { chargeId?: string } };
    if (event.type === "ChargeCreated" && event.data?.chargeId) seen.add(event.data.chargeId);
    notify();
  });
  return (chargeId) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new SmokeFailure(`no ChargeCreated event for charge ${chargeId} within ${EVENT_TIMEOUT_MS / 1000} s`)),
        EVENT_TIMEOUT_MS,
      );
      notify = () => {
        if (!seen.has(chargeId)) return;
        clearTimeout(timer);
        resolve();
      };
      notify();
    });
}

async function stopAll(): Promise<void> {
  const exits = procs.map((p) =>
    p.child.exitCode !== null ? Promise.resolve() : new Promise<void>((resolve) => p.child.once("exit", () => resolve())),
  );
  for (const p of procs) p.child.kill("SIGTERM");
  const timeout = sleep(STOP_TIMEOUT_MS).then(() => procs.forEach((p) => p.child.kill("SIGKILL")));
  await Promise.race([Promise.all(exits), timeout]);
}

function check(condition: boolean, message: string): void {
  if (!condition) throw new SmokeFailure(message);
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new SmokeFailure(`${name} is not set (this smoke test runs against real services)`);
  return value;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

main().then(
  () => process.exit(0),
  async (error: unknown) => {
    console.error(`deno smoke: FAILED: ${error instanceof Error ? error.message : String(error)}`);
    for (const p of procs) for (const line of p.output) console.error(`  ${p.name} | ${line}`);
    await stopAll();
    process.exit(1);
  },
);

// `bun test/deno-smoke.ts`: proves api.ts and relay.ts run unchanged on Deno. On the services
// testkit/services.ts decides on (DATABASE_URL and MQTT_URL, or Docker) it starts both under
// `deno run -A` on free ports, in a fresh database and under a topic prefix of their own,
// creates a charge, replays it, and waits for the relay's event at an MQTT subscriber.
// Exit 0 with one "ok" line, or 1 with one "FAILED" line followed by the processes' last output.
import { spawnSync } from "node:child_process";
import { CHARGE_CREATED, type EventData } from "../lib/charges/events.ts";
import { freePort } from "../dev/ports.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { collect } from "../testkit/mqtt.ts";
import { killAll, spawnScript, waitForHttp, type Child } from "../testkit/processes.ts";
import { processServices } from "../testkit/services.ts";
import { authEnv, authHeaders, TEST_TENANT } from "../testkit/auth.ts";

// Deno's first run resolves the npm packages and compiles: allow for a cold cache.
const READY_TIMEOUT_MS = 60_000;
const EVENT_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 10_000;

class SmokeFailure extends Error {}

const children: Child[] = [];
const started = performance.now();

async function main(): Promise<void> {
  const { adminDatabaseUrl, mqttUrl } = await processServices("the Deno smoke test").catch((error: Error) => {
    throw new SmokeFailure(error.message);
  });
  const version = spawnSync("deno", ["--version"], { encoding: "utf8" });
  if (version.status !== 0) throw new SmokeFailure("deno is not installed (npm install -g deno)");
  // The processes under test apply the schema themselves, on Deno.
  const db = await createScratchDatabase(adminDatabaseUrl, scratchName("deno", "smoke"), { migrate: false }).catch((error: Error) => {
    throw new SmokeFailure(`cannot create a database through DATABASE_URL: ${error.message}`);
  });
  try {
    await run(db.url, mqttUrl, `deno-smoke-${crypto.randomUUID().slice(0, 8)}/`);
  } finally {
    await stopAll();
    await db.drop().catch(() => {});
  }
  console.log(`deno smoke: ok on ${version.stdout.split("\n")[0]} in ${Math.round(performance.now() - started)} ms`);
}

async function run(databaseUrl: string, mqttUrl: string, prefix: string): Promise<void> {
  const [apiPort, relayPort] = [await freePort(), await freePort()];
  // Authentication on, as deployed: jose verifies the test kit's tokens on Deno too.
  const env = { DATABASE_URL: databaseUrl, MQTT_URL: mqttUrl, PORT: String(apiPort), RELAY_PORT: String(relayPort), MQTT_TOPIC_PREFIX: prefix, ...authEnv() };
  // Listening before the charge exists: the relay publishes within milliseconds of the commit.
  const subscriber = await collect(mqttUrl, prefix).catch((error: Error) => {
    throw new SmokeFailure(`cannot connect to MQTT_URL: ${error.message}`);
  });
  try {
    const api = `http://127.0.0.1:${apiPort}`;
    children.push(startDeno("api", env), startDeno("relay", env));
    await Promise.all([ready(children[0]!, `${api}/readyz`), ready(children[1]!, `http://127.0.0.1:${relayPort}/readyz`)]);
    const chargeId = await createAndReplay(api);
    await subscriber
      .waitForMessage(
        (m) => m.envelope?.type === CHARGE_CREATED && (m.envelope.data as EventData<"ChargeCreated">).chargeId === chargeId && m.envelope.tenantId === TEST_TENANT,
        EVENT_TIMEOUT_MS,
        `${CHARGE_CREATED} event for ${TEST_TENANT}'s charge ${chargeId}`,
      )
      .catch((error: Error) => {
        throw new SmokeFailure(error.message);
      });
  } finally {
    await subscriber.close().catch(() => {});
  }
}

function startDeno(name: "api" | "relay", env: Record<string, string>): Child {
  return spawnScript(`${name}.ts`, { name, runtime: "deno", env, stdout: "tail" });
}

async function ready(child: Child, url: string): Promise<void> {
  await waitForHttp(child, url, READY_TIMEOUT_MS).catch(() => {
    throw new SmokeFailure(
      child.exited
        ? `${child.name} on Deno exited with code ${child.exitCode} before it was ready`
        : `${child.name} on Deno did not answer 200 on ${url} within ${READY_TIMEOUT_MS / 1000} s`,
    );
  });
}

async function createAndReplay(api: string): Promise<string> {
  const init = {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...(await authHeaders()) },
    body: JSON.stringify({ amountCents: 4900 }),
  };
  const anonymous = await fetch(`${api}/charges`, { ...init, headers: { ...init.headers, authorization: "" } });
  await anonymous.body?.cancel();
  check(anonymous.status === 401, `POST /charges without a token answered ${anonymous.status}, not 401`);
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

async function stopAll(): Promise<void> {
  await Promise.all(children.map((child) => child.stop(STOP_TIMEOUT_MS)));
}

function check(condition: boolean, message: string): void {
  if (!condition) throw new SmokeFailure(message);
}

main().then(
  () => process.exit(0),
  async (error: unknown) => {
    console.error(`deno smoke: FAILED: ${error instanceof Error ? error.message : String(error)}`);
    for (const child of children) for (const line of child.output().split("\n").slice(-15)) if (line.trim()) console.error(`  ${child.name} | ${line}`);
    await killAll();
    process.exit(1);
  },
);

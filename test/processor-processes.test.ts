// The payment processor with real processes: two `bun api.ts` racing to resume one key, an API
// SIGKILLed while its call is held at the processor (then `bun run ops completer` finishes the
// key with no client), and the processor's metrics on /metrics.
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { authHeaders } from "../testkit/auth.ts";
import { authEnv } from "../testkit/auth.ts";
import { runToExit, startEntrypoint, type Service } from "../testkit/processes.ts";
import { startProcessorSim, type ProcessorSim } from "../testkit/processor-sim.ts";
import { chargeWith, confirmationsOf, expireLease, keyState, processorEnv } from "../testkit/processor.ts";
import { freshDatabase, type TestDatabase } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(90_000);

const TIMEOUT_MS = 4000;
let db: TestDatabase;
let sim: ProcessorSim;
let env: Record<string, string>;
let a: Service;
let b: Service;

beforeAll(async () => {
  db = await freshDatabase("processor_processes");
  sim = await startProcessorSim();
  // 8 connections each, as chaos 11, 13 and 14's APIs: three processes at the default 32 open
  // 96 of a server other work shares (max_connections 100), and one aborted on 'too many clients'.
  env = { DATABASE_URL: db.url, LOG_LEVEL: "warn", API_POOL_SIZE: "8", ...authEnv(), ...processorEnv(sim, TIMEOUT_MS) };
  [a, b] = await Promise.all([startEntrypoint("api", { env }), startEntrypoint("api", { env })]);
});
afterAll(async () => {
  await Promise.all([a, b].map((s) => s?.child.stop()));
  await sim.stop();
  await db.drop();
});

async function post(api: Service, body: string, key: string): Promise<Response> {
  return fetch(`${api.base}/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key, ...(await authHeaders()) },
    body,
  });
}

async function chargeIdOf(k: string): Promise<string> {
  const id = (await keyState(db.sql, k))?.resume?.chargeId;
  if (typeof id !== "string") throw new Error("the key has no charge id");
  return id;
}

async function eventsOf(chargeId: string): Promise<string[]> {
  return (await db.sql<{ event_type: string }[]>`select event_type from outbox where aggregate_id = ${chargeId}::uuid`).map((r) => r.event_type);
}

test("two API processes racing to resume one key: one payment confirmed once, one event, every answer 201 or 409", async () => {
  for (let round = 0; round < 4; round++) {
    const k = crypto.randomUUID();
    const body = chargeWith(1000 + round);
    sim.setFaults({ rules: [{ kind: "500-after", op: "confirm", times: 1 }] });
    expect((await post(a, body, k)).status).toBe(502);
    sim.clearFaults();
    await expireLease(db.sql, k);
    const statuses = (await Promise.all([post(a, body, k), post(b, body, k)])).map((r) => r.status);
    expect(statuses).toContain(201);
    expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
    const chargeId = await chargeIdOf(k);
    expect(confirmationsOf(sim.ledger(), chargeId)).toBe(1);
    expect(await eventsOf(chargeId)).toEqual(["ChargeCreated"]);
  }
  const metrics = await (await fetch(`${a.base}/metrics`)).text() + (await (await fetch(`${b.base}/metrics`)).text());
  expect(metrics).toMatch(/^idempotency_resumed_total\{endpoint="POST \/charges",by="request"\} [1-9]/m);
  expect(metrics).toMatch(/^http_client_request_duration_seconds_count\{[^}]*http_response_status_code="500"[^}]*\} [1-9]/m);
});

test("an API SIGKILLed while its call is held at the processor: the key waits STARTED; with no client, bun run ops completer finishes it once", async () => {
  const victim = await startEntrypoint("api", { env });
  const k = crypto.randomUUID();
  sim.setFaults({ rules: [{ kind: "hang", op: "confirm", times: 1 }] });
  const answer = post(victim, chargeWith(3300), k).then((r) => r.status, () => "no answer");
  await waitUntil(() => sim.requests().some((r) => r.op === "confirm" && r.state === "hung"), 20_000, "the confirm held at the processor");
  victim.child.kill("SIGKILL");
  expect(await answer).toBe("no answer");
  await waitUntil(() => sim.requests().some((r) => r.op === "confirm" && r.state === "abandoned"), 20_000, "the processor sees the caller gone");
  sim.clearFaults();
  const chargeId = await chargeIdOf(k);
  expect(await keyState(db.sql, k)).toMatchObject({ status: "STARTED", recovery_point: "created", lease_alive: true });
  // The lease outlives its dead holder by design; this moves its expiry instead of waiting for it.
  await expireLease(db.sql, k);
  const run = await runToExit(["bun", "run", "--silent", "ops", "completer"], env);
  expect(run.code).toBe(0);
  expect(JSON.parse(run.stdout)).toMatchObject({ job: "completer", claimed: 1, finished: 1 });
  expect(await keyState(db.sql, k)).toMatchObject({ status: "COMPLETED", response_status: 201 });
  expect(confirmationsOf(sim.ledger(), chargeId)).toBe(1);
  expect(await eventsOf(chargeId)).toEqual(["ChargeCreated"]);
  const replay = await post(a, chargeWith(3300), k);
  expect(replay.status).toBe(201);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
});

// `bun test/worker-smoke.ts`: proves worker.ts serves the API on workerd (the Cloudflare Workers
// runtime, through dev/workerd.ts as `bun run worker:dev` runs it) and under `deno serve`, with
// authentication on, against real Postgres, with the real relay (`bun relay.ts`) delivering to
// an MQTT subscriber. Under deno serve it also checks that SIGTERM lets a request in flight
// finish and exits 0. Exit 0 with one "ok" line per runtime, or 1 with one "FAILED" line
// followed by the processes' last output.
import { spawnSync } from "node:child_process";
import { CHARGE_CREATED, CHARGE_REFUNDED, type EventData } from "../lib/charges/events.ts";
import { freePort } from "../dev/ports.ts";
import { planWorkerd } from "../dev/workerd.ts";
import { createScratchDatabase, holdKey, scratchName, waitForBackendOnLock, type ScratchDatabase } from "../testkit/database.ts";
import { collect, type Collector } from "../testkit/mqtt.ts";
import { acceptsTcp, killAll, spawnChild, startEntrypoint, waitForHttp, type Child } from "../testkit/processes.ts";
import { processServices } from "../testkit/services.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { waitUntil } from "../testkit/wait.ts";

// Deno's first run resolves the npm packages and compiles; workerd starts in well under that.
const READY_TIMEOUT_MS = 60_000;
const EVENT_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 10_000;
// The worker's application_name (worker.ts), as pg_stat_activity shows it.
const WORKER_APP = "charges-worker";
const CONCURRENT_REQUESTS = 20;
const CONCURRENT_KEYS = 5;

type Runtime = "workerd" | "deno";

class SmokeFailure extends Error {}

const children: Child[] = [];
const cleanups: (() => void)[] = [];

async function main(): Promise<void> {
  const { adminDatabaseUrl, mqttUrl } = await processServices("the worker smoke test").catch((error: Error) => {
    throw new SmokeFailure(error.message);
  });
  const version = spawnSync("deno", ["--version"], { encoding: "utf8" });
  if (version.status !== 0) throw new SmokeFailure("deno is not installed (npm install -g deno)");
  // The worker never migrates: the schema is applied once per deploy, as here.
  const db = await createScratchDatabase(adminDatabaseUrl, scratchName("worker", "smoke"));
  const prefix = `worker-smoke-${crypto.randomUUID().slice(0, 8)}/`;
  const collector = await collect(mqttUrl, prefix);
  try {
    const env = { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, LOG_LEVEL: "warn", ...authEnv() };
    const relay = await startEntrypoint("relay", { env: { ...env, RELAY_PORT: undefined }, stdout: "tail", timeoutMs: READY_TIMEOUT_MS });
    children.push(relay.child);
    for (const runtime of ["workerd", "deno"] as const) {
      const started = performance.now();
      const { child, base } = await startWorker(runtime, env);
      const latencies = await checkApi(runtime, base, db, collector);
      if (runtime === "deno") await checkSigterm(child, base, db);
      else await child.stop(STOP_TIMEOUT_MS);
      const median = latencies.sort((a, b) => a - b)[Math.floor(latencies.length / 2)]!;
      console.log(`worker smoke: ok on ${runtime} in ${Math.round(performance.now() - started)} ms (commit → subscriber median ${Math.round(median)} ms over ${latencies.length} events)`);
    }
  } finally {
    await Promise.all(children.map((child) => child.stop(STOP_TIMEOUT_MS)));
    for (const cleanup of cleanups) cleanup();
    await collector.close().catch(() => {});
    await db.drop().catch(() => {});
  }
}

async function startWorker(runtime: Runtime, env: Record<string, string>): Promise<{ child: Child; base: string }> {
  const port = await freePort();
  let child: Child;
  if (runtime === "workerd") {
    const plan = await planWorkerd(port, env, "127.0.0.1");
    cleanups.push(plan.cleanup);
    child = spawnChild(plan.cmd, { name: "workerd", env: plan.env, stdout: "tail" });
  } else {
    child = spawnChild(["deno", "serve", "-A", "--host", "127.0.0.1", "--port", String(port), "worker.ts"], { name: "deno serve", env, stdout: "tail" });
  }
  children.push(child);
  const base = `http://127.0.0.1:${port}`;
  await waitForHttp(child, `${base}/readyz`, READY_TIMEOUT_MS).catch((error: Error) => {
    throw new SmokeFailure(`${runtime}: ${error.message}`);
  });
  return { child, base };
}

/** Every check but SIGTERM; the commit → subscriber latencies of the charges it created. */
async function checkApi(runtime: Runtime, base: string, db: ScratchDatabase, collector: Collector): Promise<number[]> {
  const check = (condition: boolean, message: string): void => {
    if (!condition) throw new SmokeFailure(`${runtime}: ${message}`);
  };
  const auth = { authorization: `Bearer ${await tokenFor()}` };
  const post = (key: string | null, body: string, headers: Record<string, string> = auth): Promise<Response> =>
    fetch(`${base}/charges`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(key === null ? {} : { "idempotency-key": key }), ...headers },
      body,
    });

  const unauthenticated = await post(crypto.randomUUID(), '{"amountCents":100}', {});
  check(unauthenticated.status === 401, `POST without a token answered ${unauthenticated.status}, not 401`);
  check(unauthenticated.headers.get("www-authenticate") === "Bearer", "the 401 lacks WWW-Authenticate: Bearer");

  const key = crypto.randomUUID();
  const first = await post(key, '{"amountCents":4900}');
  const firstBody = await first.text();
  check(first.status === 201, `POST /charges answered ${first.status}, not 201: ${firstBody.slice(0, 200)}`);
  check(first.headers.get("idempotent-replayed") === null, "the first answer claims to be a replay");
  const replay = await post(key, '{"amountCents":4900}');
  const replayBody = await replay.text();
  check(replay.status === 201 && replayBody === firstBody, `the replay (${replay.status}) differs from the first:\n  ${firstBody}\n  ${replayBody}`);
  check(replay.headers.get("idempotent-replayed") === "true", "the replay lacks Idempotent-Replayed: true");
  const charge = JSON.parse(firstBody) as { id: string; amountCents: number; createdAt: string };

  const conflict = await post(key, '{"amountCents":5000}');
  check(conflict.status === 422, `the same key with another body answered ${conflict.status}, not 422`);
  const noKey = await post(null, '{"amountCents":4900}');
  check(noKey.status === 400, `a POST without Idempotency-Key answered ${noKey.status}, not 400`);
  const badBody = await post(crypto.randomUUID(), '{"amountCents":"x"}');
  check(badBody.status === 400, `a body that breaks the schema answered ${badBody.status}, not 400`);

  const got = await fetch(`${base}/charges/${charge.id}`, { headers: auth });
  const gotBody = await got.text();
  // The charge as it is now (ChargeView): the created one, nothing refunded, in the schema's order.
  const view = JSON.stringify({ id: charge.id, amountCents: charge.amountCents, currency: "usd", status: "succeeded", refundedCents: 0, createdAt: charge.createdAt });
  check(got.status === 200 && gotBody === view, `GET /charges/:id answered ${got.status}: ${gotBody.slice(0, 200)}, not ${view}`);

  await checkRefund(runtime, base, auth, charge.id, db, collector, check);

  // 409 while held: the held request waits on the key's row inside its statement.
  const heldKey = crypto.randomUUID();
  const hold = await holdKey(db.sql, heldKey);
  try {
    const held = post(heldKey, '{"amountCents":700}');
    await waitForBackendOnLock(db.sql, WORKER_APP);
    const second = await post(heldKey, '{"amountCents":700}');
    check(second.status === 409, `a second request while the first is held answered ${second.status}, not 409`);
    await hold.release();
    const released = await held;
    check(released.status === 201, `the held request answered ${released.status} once released, not 201`);
  } finally {
    await hold.release();
  }

  const ids = [charge.id, ...(await concurrentKeys(base, auth, db, check))];
  const events = await Promise.all(
    ids.map((id) =>
      collector.waitForMessage((m) => m.envelope?.type === CHARGE_CREATED && (m.envelope.data as EventData<"ChargeCreated">).chargeId === id, EVENT_TIMEOUT_MS, `${CHARGE_CREATED} event for charge ${id}`),
    ),
  ).catch((error: Error) => {
    throw new SmokeFailure(`${runtime}: ${error.message}`);
  });
  // The outbox row's created_at is its transaction's start: each figure slightly overstates commit → subscriber.
  return events.map((m) => performance.timeOrigin + m.at - Date.parse(m.envelope!.createdAt));
}

/**
 * POST /charges/:id/refunds through the worker: a 201 with the refund and its Location, the
 * replay byte for byte, one refund row with the charge's refunded total, and its
 * ChargeRefunded event (sequence 2) at the subscriber.
 */
async function checkRefund(
  runtime: Runtime,
  base: string,
  auth: Record<string, string>,
  chargeId: string,
  db: ScratchDatabase,
  collector: Collector,
  check: (c: boolean, m: string) => void,
): Promise<void> {
  const key = crypto.randomUUID();
  const refund = (): Promise<Response> =>
    fetch(`${base}/charges/${chargeId}/refunds`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": key, ...auth },
      body: '{"amountCents":1000}',
    });
  const first = await refund();
  const firstBody = await first.text();
  check(first.status === 201, `POST /charges/:id/refunds answered ${first.status}, not 201: ${firstBody.slice(0, 200)}`);
  check(first.headers.get("idempotent-replayed") === null, "the first refund claims to be a replay");
  const created = JSON.parse(firstBody) as { id: string; chargeId: string; amountCents: number };
  check(created.chargeId === chargeId && created.amountCents === 1000, `the refund's body is ${firstBody.slice(0, 200)}`);
  const location = `/charges/${chargeId}/refunds/${created.id}`;
  check(first.headers.get("location") === location, `the refund's Location is ${first.headers.get("location")}, not ${location}`);
  const replay = await refund();
  const replayBody = await replay.text();
  check(replay.status === 201 && replayBody === firstBody, `the refund's replay (${replay.status}) differs from the first:\n  ${firstBody}\n  ${replayBody}`);
  check(replay.headers.get("idempotent-replayed") === "true", "the refund's replay lacks Idempotent-Replayed: true");
  const [row] = await db.sql<{ refunds: number; refunded: number }[]>`
    select (select count(*)::int from refunds where charge_id = ${chargeId}) as refunds,
           (select refunded_cents from charges where id = ${chargeId}) as refunded`;
  check(row?.refunds === 1 && row.refunded === 1000, `a refund and its replay left ${row?.refunds} refunds and ${row?.refunded} cents refunded`);
  const event = await collector
    .waitForMessage((m) => m.envelope?.type === CHARGE_REFUNDED && (m.envelope.data as EventData<"ChargeRefunded">).refundId === created.id, EVENT_TIMEOUT_MS, `${CHARGE_REFUNDED} event for refund ${created.id}`)
    .catch((error: Error) => {
      throw new SmokeFailure(`${runtime}: ${error.message}`);
    });
  check(event.envelope?.sequence === 2, `the refund's event has sequence ${event.envelope?.sequence}, not 2`);
}

/** 20 concurrent requests over 5 keys: exactly 5 charges, every answer a 201 or a 409; the 5 ids. */
async function concurrentKeys(base: string, auth: Record<string, string>, db: ScratchDatabase, check: (c: boolean, m: string) => void): Promise<string[]> {
  const keys = Array.from({ length: CONCURRENT_KEYS }, () => crypto.randomUUID());
  const before = (await db.sql<{ n: number }[]>`select count(*)::int as n from charges`)[0]!.n;
  const answers = await Promise.all(
    Array.from({ length: CONCURRENT_REQUESTS }, async (_, i) => {
      const res = await fetch(`${base}/charges`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": keys[i % CONCURRENT_KEYS]!, ...auth },
        body: '{"amountCents":1234}',
      });
      return { status: res.status, body: await res.text() };
    }),
  );
  const statuses = answers.map((a) => a.status);
  check(statuses.every((s) => s === 201 || s === 409), `concurrent answers were ${statuses.join(",")}: only 201 and 409 expected`);
  const ids = new Set(answers.filter((a) => a.status === 201).map((a) => (JSON.parse(a.body) as { id: string }).id));
  const after = (await db.sql<{ n: number }[]>`select count(*)::int as n from charges`)[0]!.n;
  check(after - before === CONCURRENT_KEYS, `${CONCURRENT_REQUESTS} requests over ${CONCURRENT_KEYS} keys made ${after - before} charges`);
  check(ids.size <= CONCURRENT_KEYS, `the 201s name ${ids.size} distinct charges for ${CONCURRENT_KEYS} keys`);
  // A key all of whose requests met 409 still committed its charge: its replay names it.
  for (const key of keys) {
    const res = await fetch(`${base}/charges`, { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key, ...auth }, body: '{"amountCents":1234}' });
    ids.add(((await res.json()) as { id: string }).id);
  }
  check(ids.size === CONCURRENT_KEYS, `the ${CONCURRENT_KEYS} keys name ${ids.size} charges`);
  return [...ids];
}

/**
 * deno serve on SIGTERM: stops listening, lets the request in flight finish, exits 0.
 * The request is held in its statement, SIGTERM is sent, and only once the port refuses
 * connections (the signal was acted on) is it let go.
 */
async function checkSigterm(child: Child, base: string, db: ScratchDatabase): Promise<void> {
  const key = crypto.randomUUID();
  const hold = await holdKey(db.sql, key);
  try {
    const inFlight = fetch(`${base}/charges`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": key, authorization: `Bearer ${await tokenFor()}` },
      body: '{"amountCents":300}',
    }).then((r) => r.status, (error: Error) => `failed: ${error.message}`);
    await waitForBackendOnLock(db.sql, WORKER_APP);
    child.kill("SIGTERM");
    const port = Number(new URL(base).port);
    await waitUntil(async () => !(await acceptsTcp(port)), STOP_TIMEOUT_MS, "deno serve to stop listening after SIGTERM");
    await hold.release();
    const status = await inFlight;
    if (status !== 201) throw new SmokeFailure(`deno: the request in flight at SIGTERM answered ${status}, not 201`);
    const code = await child.done;
    if (code !== 0) throw new SmokeFailure(`deno: deno serve exited with ${code} after SIGTERM, not 0`);
  } finally {
    await hold.release();
  }
}

main().then(
  () => process.exit(0),
  async (error: unknown) => {
    console.error(`worker smoke: FAILED: ${error instanceof Error ? error.message : String(error)}`);
    for (const child of children) for (const line of child.output().split("\n").slice(-15)) if (line.trim()) console.error(`  ${child.name} | ${line}`);
    await killAll();
    for (const cleanup of cleanups) cleanup();
    process.exit(1);
  },
);

// Races and faults, held deterministically: the test holds a lock the winner must wait for
// (an uncommitted row with the same (key, endpoint), which the winner's insert queues
// behind on the unique index) and polls pg_stat_activity until the winner is blocked.
import { setDefaultTimeout } from "bun:test";
import { expect, test } from "bun:test";
import { StartupError } from "../lib/platform/startup.ts";
import { endpointOf } from "../lib/idempotency/model.ts";
import { createIdempotencyCore } from "../lib/idempotency/run.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { createSql } from "../lib/platform/db.ts";
import { createApiHandler } from "../lib/api/http/pipeline.ts";
import { SCHEMAS } from "../lib/api/routes.ts";
import { createAdmission } from "../lib/api/admission.ts";
import { createReadiness } from "../lib/api/readiness.ts";
import { createAuthenticator } from "../lib/api/auth.ts";
import { createApiMetrics } from "../lib/api/metrics.ts";
import { loadConfig } from "../lib/platform/config.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { holdKey as holdHeldKey } from "../testkit/database.ts";
import { apiTestContext, counts, postCharge, startTestApi, waitForApiBlockedOnLock } from "../testkit/api.ts";

setDefaultTimeout(30_000);

const { db, api } = await apiTestContext("api_race");

const body = '{"amountCents":4900}';

const holdKey = (k: string) => holdHeldKey(db.sql, k, endpointOf(createCharge));

test("two overlapping requests: the second gets 409 + Retry-After while the first is still in flight", async () => {
  const k = crypto.randomUUID();
  const hold = await holdKey(k);
  let winnerDone = false;
  const winner = postCharge(api, body, { key: k }).then((res) => ((winnerDone = true), res));
  try {
    await waitForApiBlockedOnLock(db.sql);
    const loser = await postCharge(api, body, { key: k });
    expect(loser.status).toBe(409);
    expect(loser.headers.get("retry-after")).toBe("1");
    expect(await loser.json()).toMatchObject({ type: "https://charges.example/problems/request-in-flight", status: 409 });
    // Answered while the winner is still held: it did not queue behind it.
    expect(winnerDone).toBe(false);
  } finally {
    await hold.release();
  }
  const won = await winner;
  expect(won.status).toBe(201);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
  const retry = await postCharge(api, body, { key: k });
  expect(retry.status).toBe(201);
  expect(retry.headers.get("idempotent-replayed")).toBe("true");
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("the database connection dies mid-request: 503 + Retry-After, nothing half-written, the retry creates one charge", async () => {
  const k = crypto.randomUUID();
  const hold = await holdKey(k);
  let res: Response | undefined;
  try {
    const pending = postCharge(api, body, { key: k }).then((r) => (res = r));
    // The service resends the statement when its connection is lost (safe: it is atomic
    // and keyed), so kill the backend every time the request waits on the lock again.
    for (let kills = 0; res === undefined && kills < 6; kills++) {
      const pid = await Promise.race([waitForApiBlockedOnLock(db.sql), pending.then(() => undefined)]);
      if (pid !== undefined) await db.sql`select pg_terminate_backend(${pid})`;
    }
    await pending;
  } finally {
    await hold.release();
  }
  expect(res?.status).toBe(503);
  expect(res?.headers.get("retry-after")).toBe("1");
  const problem = (await res!.json()) as Record<string, unknown>;
  expect(problem).toMatchObject({ type: "https://charges.example/problems/service-unavailable", status: 503 });
  expect(JSON.stringify(problem)).not.toMatch(/idempotency_keys|insert|terminat/i);
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });

  const retry = await postCharge(api, body, { key: k });
  expect(retry.status).toBe(201);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("many concurrent requests with one key: exactly one charge, every answer a 201 or a 409", async () => {
  const k = crypto.randomUUID();
  const responses = await Promise.all(Array.from({ length: 30 }, () => postCharge(api, body, { key: k })));
  const statuses = responses.map((r) => r.status);
  expect(statuses.filter((s) => s !== 201 && s !== 409)).toEqual([]);
  const fresh = responses.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") === null);
  expect(fresh.length).toBe(1);
  expect(await counts(db.sql)).toEqual({ charges: 1, outbox: 1, keys: 1 });
});

test("a database that does not answer at start-up is one clear error", async () => {
  const error = await startTestApi("postgres://postgres@127.0.0.1:1/nowhere").then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StartupError);
  expect(String((error as Error).message)).toContain("DATABASE_URL");
});

test("a database that stops answering after start-up: 503 + Retry-After and /readyz not ready", async () => {
  // The handler built by hand around a pool whose server is gone (nothing listens on port 1).
  const sql = createSql("postgres://postgres@127.0.0.1:1/gone", { max: 2 });
  const deps = {
    sql,
    core: createIdempotencyCore(sql, { ttlSeconds: 60 }),
    auth: createAuthenticator(loadConfig({ AUTH_MODE: "none" }).auth),
    log: silentLogger,
    counters: createApiMetrics(),
    admission: createAdmission(loadConfig({}).admission),
    readiness: createReadiness(),
  };
  const handle = createApiHandler(SCHEMAS, deps);
  const app = { handle };
  try {
    const res = await app.handle(
      new Request("http://localhost/charges", {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
        body,
      }),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/service-unavailable", status: 503 });
    const ready = await app.handle(new Request("http://localhost/readyz"));
    expect(ready.status).toBe(503);
    expect((await app.handle(new Request("http://localhost/healthz"))).status).toBe(200);
  } finally {
    await sql.end({ timeout: 1 });
  }
});

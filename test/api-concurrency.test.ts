// Races and faults, held deterministically: the test holds a lock the winner must wait for
// (an uncommitted row with the same (key, endpoint), which the winner's insert queues
// behind on the unique index) and polls pg_stat_activity until the winner is blocked.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { CHARGES_ENDPOINT } from "../lib/charges.ts";
import { StartupError } from "../lib/api-main.ts";
import { freshDatabase } from "./support/services.ts";
import { counts, postCharge, startTestApi, waitForApiBlockedOnLock } from "./support/api.ts";

const db = await freshDatabase("api_race");
const api = await startTestApi(db.url);
afterAll(async () => {
  await api.close();
  await db.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, charges`;
});

const body = '{"amountCents":4900}';

/** Opens a transaction holding an uncommitted key row; the caller ends it with the result's release(). */
async function holdKey(k: string) {
  const holder = await db.sql.reserve();
  await holder`begin`;
  await holder`insert into idempotency_keys (key, endpoint, request_hash, status, expires_at)
               values (${k}, ${CHARGES_ENDPOINT}, 'held-by-test', 'STARTED', now() + interval '1 hour')`;
  return {
    async release() {
      await holder`rollback`;
      holder.release();
    },
  };
}

test("two overlapping requests: the second gets 409 + Retry-After while the first is still in flight", async () => {
  const k = crypto.randomUUID();
  const hold = await holdKey(k);
  let winnerDone = false;
  const winner = postCharge(api, body, { key: k }).then((res) => ((winnerDone = true), res));
  try {
    await waitForApiBlockedOnLock(db.sql);
    const started = performance.now();
    const loser = await postCharge(api, body, { key: k });
    const elapsedMs = performance.now() - started;
    expect(loser.status).toBe(409);
    expect(loser.headers.get("retry-after")).toBe("1");
    expect(await loser.json()).toMatchObject({ type: "https://charges.example/problems/request-in-flight", status: 409 });
    // Answered while the winner is still held: it did not queue behind it.
    expect(winnerDone).toBe(false);
    expect(elapsedMs).toBeLessThan(5_000);
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
  let res: Response;
  try {
    const pending = postCharge(api, body, { key: k });
    const pid = await waitForApiBlockedOnLock(db.sql);
    await db.sql`select pg_terminate_backend(${pid})`;
    res = await pending;
  } finally {
    await hold.release();
  }
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("1");
  const problem = (await res.json()) as Record<string, unknown>;
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

test("the database goes away after start-up: 503 and /readyz not ready, then back", async () => {
  // Point a second API at a database we can take away: drop connections and forbid new ones.
  const other = await freshDatabase("api_down");
  const downApi = await startTestApi(other.url);
  try {
    expect((await postCharge(downApi, body, { key: crypto.randomUUID() })).status).toBe(201);
    await db.sql.unsafe(`alter database ${other.name} with allow_connections false`);
    await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${other.name} and pid <> pg_backend_pid()`;
    const res = await postCharge(downApi, body, { key: crypto.randomUUID() });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect((await downApi.fetch(new Request("http://localhost/readyz"))).status).toBe(503);
    await db.sql.unsafe(`alter database ${other.name} with allow_connections true`);
    const again = await postCharge(downApi, body, { key: crypto.randomUUID() });
    expect(again.status).toBe(201);
    const [row] = await other.sql`select count(*)::int as n from charges`;
    expect(row?.n).toBe(2);
  } finally {
    await db.sql.unsafe(`alter database ${other.name} with allow_connections true`);
    await downApi.close();
    await other.drop();
  }
});

// The API's time bounds behind PgBouncer in transaction mode (a private one:
// testkit/pgbouncer.ts), where no connection may carry them: a lock queue answers 503 by the
// same bounds as on a direct connection (test/api-timeouts.test.ts), and a BEGIN the pooler
// queues is given up at the request's deadline with nothing written. Every "in time" is shown
// by order of events (answered while the lock or the connection was still held).
import { expect, setDefaultTimeout } from "bun:test";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { counts, postCharge, startTestApi, TEST_API_APP } from "../testkit/api.ts";
import { privatePgbouncer } from "../testkit/pgbouncer.ts";
import { pgbouncerTestFile } from "../testkit/pgbouncer-context.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { behind, db, cleanups } = await pgbouncerTestFile("test/pgbouncer-timeouts.test.ts", "pgbouncer_timeouts");


const UNAVAILABLE_TYPE = "https://charges.example/problems/service-unavailable";
const POOLED = { DATABASE_POOLER: "transaction" };
const body = (amountCents: number) => JSON.stringify({ amountCents });

async function throughPgbouncer(poolSize: number): Promise<string> {
  const bouncer = await privatePgbouncer(db.url, { poolSize });
  cleanups.push(() => bouncer.stop());
  return bouncer.urlFor(db.url);
}

async function expectTimeBound503(res: Response): Promise<void> {
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("1");
  const problem = (await res.json()) as { type: string; detail: string };
  expect(problem.type).toBe(UNAVAILABLE_TYPE);
  expect(problem.detail).toContain("time bounds");
}

/** A transaction of ours on a connection of `sql` until released; `held()` asks whether it is still open. */
async function holdTransaction(sql: Sql, statement: string): Promise<{ held(): Promise<boolean>; release(): Promise<void> }> {
  const holder = await sql.reserve();
  await holder`begin`;
  // `statement` is one of this file's literals, never input.
  await holder.unsafe(statement);
  return {
    async held() {
      // A statement after the BEGIN starts later than its transaction: still the same one.
      const [row] = await holder<{ open: boolean }[]>`select transaction_timestamp() < statement_timestamp() as open`;
      return row?.open === true;
    },
    async release() {
      await holder`rollback`;
      holder.release();
    },
  };
}

// The request's own deadline is far beyond the test's: only the server's bounds can answer.
const NO_DEADLINE = { API_REQUEST_TIMEOUT_MS: "3600000" };

behind.each([
  ["lock_timeout (default bounds)", NO_DEADLINE],
  ["statement_timeout", { ...NO_DEADLINE, API_STATEMENT_TIMEOUT_MS: "300", API_LOCK_TIMEOUT_MS: "600000" }],
])("through it, ACCESS EXCLUSIVE on idempotency_keys, %s: 503 while the lock is held; after release the key creates the charge", async (_bound, env: Record<string, string>) => {
  const api = await startTestApi(await throughPgbouncer(4), { ...POOLED, ...env });
  const key = crypto.randomUUID();
  try {
    const lock = await holdTransaction(db.sql, "lock table idempotency_keys in access exclusive mode");
    try {
      const [res] = await Promise.all([
        postCharge(api, body(4900), { key }),
        waitUntil(async () => {
          const [row] = await db.sql<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity
             where datname = current_database() and application_name = ${TEST_API_APP} and wait_event_type = 'Lock'`;
          return (row?.n ?? 0) > 0;
        }, 10_000, "the API's statement to wait on the lock"),
      ]);
      expect(await lock.held()).toBe(true);
      await expectTimeBound503(res);
    } finally {
      await lock.release();
    }
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
    expect((await postCharge(api, body(4900), { key })).status).toBe(201);
  } finally {
    await api.close();
  }
});

behind("through it, every server connection held: the request's deadline answers 503 while the BEGIN waits in the pooler's queue, and nothing is written after", async () => {
  const url = await throughPgbouncer(1);
  const api = await startTestApi(url, { ...POOLED, API_STATEMENT_TIMEOUT_MS: "300", API_POOL_WAIT_MS: "200", API_REQUEST_TIMEOUT_MS: "600" });
  const holders = createSql(url, { max: 1, pooler: "transaction" });
  const key = crypto.randomUUID();
  let apiClosed = false;
  try {
    const server = await holdTransaction(holders, "select 1");
    try {
      const res = await postCharge(api, body(777), { key });
      expect(await server.held()).toBe(true);
      await expectTimeBound503(res);
    } finally {
      await server.release();
    }
    // Closing waits for every transaction handed to the pool: the queued one has run by then,
    // and rolled back without its statement.
    await api.close();
    apiClosed = true;
    expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
    const again = await startTestApi(url, POOLED);
    try {
      const created = await postCharge(again, body(777), { key });
      expect(created.status).toBe(201);
      expect(created.headers.get("idempotent-replayed")).toBeNull();
    } finally {
      await again.close();
    }
  } finally {
    if (!apiClosed) await api.close();
    await holders.end({ timeout: 1 });
  }
});

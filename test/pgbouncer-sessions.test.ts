// Behind PgBouncer in transaction mode (private ones: testkit/pgbouncer.ts): what breaks
// without DATABASE_POOLER=transaction, each shown deterministically on a pooler of one or
// two server connections, and what the setting does instead: unnamed statements, the API's
// time bounds set in each transaction, job locks held by transactions.
import { expect, setDefaultTimeout } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { createSql, type DbOptions, type Sql } from "../lib/platform/db.ts";
import { silentLogger } from "../lib/platform/log.ts";
import { listenForOutbox, OUTBOX_CHANNEL } from "../lib/platform/wakeup.ts";
import { JOBS, newGauges, runJob, type JobName } from "../lib/ops/jobs.ts";
import { startTestApi } from "../testkit/api.ts";
import { authEnv } from "../testkit/auth.ts";
import { waitForBackendOnLock } from "../testkit/database.ts";
import { privatePgbouncer } from "../testkit/pgbouncer.ts";
import { pgbouncerTestFile } from "../testkit/pgbouncer-context.ts";
import { runToExit } from "../testkit/processes.ts";
import { services } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const { behind, db, cleanups } = await pgbouncerTestFile("test/pgbouncer-sessions.test.ts", "pgbouncer_sessions");
const { mqttUrl } = await services();
const config = loadConfig({ DATABASE_URL: db.url });

/** The test database through a new PgBouncer with `poolSize` server connections. */
async function throughPgbouncer(poolSize: number): Promise<string> {
  const bouncer = await privatePgbouncer(db.url, { poolSize });
  cleanups.push(() => bouncer.stop());
  return bouncer.urlFor(db.url);
}

function pool(url: string, options: DbOptions = {}): Sql {
  const sql = createSql(url, { max: 1, ...options });
  cleanups.push(() => sql.end({ timeout: 1 }));
  return sql;
}

/** Holds a server connection of the pooler (an open transaction) until released. */
async function holdServerConnection(url: string): Promise<() => Promise<void>> {
  const holder = await pool(url, { pooler: "transaction" }).reserve();
  await holder`begin`;
  await holder`select 1`;
  return async () => {
    await holder`rollback`;
    holder.release();
  };
}

behind.each([["api.ts"], ["relay.ts"]])(
  "bun %s through it with the default DATABASE_POOLER: one line naming the refused startup parameter and the setting, exit 1",
  async (entry) => {
    const url = await throughPgbouncer(2);
    const env = { DATABASE_URL: url, MQTT_URL: mqttUrl, LOG_LEVEL: "warn", PORT: "0", RELAY_PORT: "0", ...authEnv() };
    const { code, stderr } = await runToExit(["bun", entry], env);
    expect(code).toBe(1);
    const lines = stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("08P01");
    expect(lines[0]).toContain("statement_timeout");
    expect(lines[0]).toContain("DATABASE_POOLER=transaction");
  },
);

/**
 * `subject`'s statement prepared on one server connection (B, the other one held), then run
 * in a transaction that can only get the other (A): what any pool meets once the pooler
 * hands it another connection than the one it prepared on.
 */
async function preparedThenOnAnotherConnection(url: string, subject: Sql): Promise<unknown> {
  const releaseA = await holdServerConnection(url);
  await subject`select ${1}::int as n`;
  const releaseB = await holdServerConnection(url);
  await releaseA();
  try {
    return await subject.begin((tx) => tx`select ${1}::int as n`);
  } finally {
    await releaseB();
  }
}

behind("named prepared statements (the default) fail once a transaction lands on another server connection (26000); the pooler setting's unnamed ones run", async () => {
  const url = await throughPgbouncer(2);
  await expect(preparedThenOnAnotherConnection(url, pool(url))).rejects.toMatchObject({ code: "26000" });
  expect(await preparedThenOnAnotherConnection(url, pool(url, { pooler: "transaction" }))).toEqual([{ n: 1 }]);
});

behind("LISTEN through it is left on a server connection other clients get; listenForOutbox refuses a pooled pool", async () => {
  const url = await throughPgbouncer(1);
  await pool(url).listen(OUTBOX_CHANNEL, () => {});
  const other = pool(url, { pooler: "transaction" });
  const [row] = await other<{ channels: string[] }[]>`select array(select pg_listening_channels()) as channels`;
  expect(row?.channels).toContain(OUTBOX_CHANNEL);
  await expect(listenForOutbox(other, () => {})).rejects.toThrow("LISTEN through a transaction pooler");
});

behind("a session advisory lock through it is granted to two clients at once (they share the server connection)", async () => {
  const url = await throughPgbouncer(1);
  // A lock of this test's own: the server connection keeps what it was granted after the test.
  const lockId = String(Date.now());
  const tryLock = async (sql: Sql) => (await sql<{ locked: boolean }[]>`select pg_try_advisory_lock(${lockId}::bigint) as locked`)[0]?.locked;
  const [a, b] = [pool(url), pool(url)];
  expect([await tryLock(a), await tryLock(b)]).toEqual([true, true]);
  await a`select pg_advisory_unlock_all()`;
});

// A table each job reads or writes: locked, it holds the first runner inside its job.
const TABLE_OF: Partial<Record<JobName, string>> = { "outbox-retention": "outbox", reconcile: "charges" };

/** Holds ACCESS EXCLUSIVE on `table` (from TABLE_OF, never input) from a direct session until released. */
async function lockTable(table: string): Promise<() => Promise<void>> {
  const holder = await db.sql.reserve();
  await holder`begin`;
  await holder.unsafe(`lock table ${table} in access exclusive mode`);
  return async () => {
    await holder`rollback`;
    holder.release();
  };
}

behind.each([["outbox-retention"], ["reconcile"]] as const)(
  "DATABASE_POOLER=transaction: while one process runs %s, its transaction holding the job's lock, another skips it",
  async (job) => {
    const url = await throughPgbouncer(4);
    const a = pool(url, { pooler: "transaction", applicationName: "charges-relay-a" });
    const b = pool(url, { pooler: "transaction", applicationName: "charges-relay-b" });
    const release = await lockTable(TABLE_OF[job]!);
    const runA = runJob(job, a, config, newGauges(), silentLogger);
    try {
      await waitForBackendOnLock(db.sql, "charges-relay-a");
      expect(await runJob(job, b, config, newGauges(), silentLogger)).toEqual({ job, skipped: true });
    } finally {
      await release();
    }
    expect(await runA).not.toHaveProperty("skipped");
    // The lock ended with A's transaction: B runs the job now.
    expect(await runJob(job, b, config, newGauges(), silentLogger)).not.toHaveProperty("skipped");
  },
);

behind("DATABASE_POOLER=transaction: a retention run deletes batch by batch, and a direct process's session lock still excludes it", async () => {
  const url = await throughPgbouncer(2);
  const sql = pool(url, { pooler: "transaction" });
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, expires_at)
               select 'expired-' || n, 'POST /charges', 'h', 'COMPLETED', now() - interval '1 second' from generate_series(1, 2500) as n`;
  const holder = await db.sql.reserve();
  const lockId = JOBS["key-retention"].lockId.toString();
  const [held] = await holder<{ locked: boolean }[]>`select pg_try_advisory_lock(${lockId}::bigint) as locked`;
  expect(held?.locked).toBe(true);
  try {
    expect(await runJob("key-retention", sql, config, newGauges(), silentLogger)).toEqual({ job: "key-retention", skipped: true });
  } finally {
    await holder`select pg_advisory_unlock(${lockId}::bigint)`;
    holder.release();
  }
  // Expired answers become tombstones (IDEMPOTENCY_TOMBSTONE_SECONDS, 30 days): none deleted yet.
  expect(await runJob("key-retention", sql, config, newGauges(), silentLogger)).toEqual({ job: "key-retention", tombstoned: 2500, deleted: 0, batches: 3 });
});

const pooledApiEnv = { DATABASE_POOLER: "transaction" };

behind("DATABASE_POOLER=transaction: the API's transactions carry its bounds, its sessions none (the pooler would refuse them)", async () => {
  const api = await startTestApi(await throughPgbouncer(2), pooledApiEnv);
  try {
    const settings = async (sql: Sql) => {
      const [row] = await sql<{ statement: string; lock: string }[]>`
        select current_setting('statement_timeout') as statement, current_setting('lock_timeout') as lock`;
      return row;
    };
    expect(await api.sql.begin((tx) => settings(tx as unknown as Sql))).toEqual({ statement: "5s", lock: "2s" });
    expect(await settings(api.sql)).toEqual({ statement: "0", lock: "0" });
  } finally {
    await api.close();
  }
});

// One runner per ops job: with two relays on one database, one runs a job and the other skips
// it for that round; the relay's loop and `bun run ops` skip a job another process is running.
import { afterAll, afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { loadConfig } from "../lib/platform/config.ts";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { createLogger, silentLogger } from "../lib/platform/log.ts";
import { DELETE_BATCH, JOB_NAMES, JOBS, MAX_BATCHES_PER_RUN, newGauges, registerOpsGauges, runJob, startOpsLoop, type JobName } from "../lib/ops/jobs.ts";
import { startTelemetry } from "../lib/platform/telemetry.ts";
import { waitForBackendOnLock } from "../testkit/database.ts";
import { runToExit } from "../testkit/processes.ts";
import { freshDatabase } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("ops_locks");
const config = loadConfig({ DATABASE_URL: db.url });
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(() => db.drop());

function relayPool(name: string): Sql {
  const sql = createSql(db.url, { max: 3, applicationName: name });
  cleanups.push(() => sql.end({ timeout: 1 }));
  return sql;
}

/** Holds ACCESS EXCLUSIVE on `table` until the returned release is called. */
async function lockTable(table: string): Promise<() => Promise<void>> {
  const holder = await db.sql.reserve();
  await holder`begin`;
  // `table` comes from TABLE_OF below, never from input: an identifier cannot be a parameter.
  await holder.unsafe(`lock table ${table} in access exclusive mode`);
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    await holder`rollback`;
    holder.release();
  };
  cleanups.push(release);
  return release;
}

/** Holds the job's advisory lock from a session of the test's own. */
async function holdJobLock(job: JobName): Promise<() => Promise<void>> {
  const holder = await db.sql.reserve();
  await holder`select pg_advisory_lock(${JOBS[job].lockId.toString()}::bigint)`;
  const release = async () => {
    await holder`select pg_advisory_unlock(${JOBS[job].lockId.toString()}::bigint)`;
    holder.release();
  };
  cleanups.push(release);
  return release;
}

// A table each job reads or writes: locked, it holds the first runner inside its job.
const TABLE_OF: Record<JobName, string> = {
  "key-retention": "idempotency_keys",
  "stale-keys": "idempotency_keys",
  reconcile: "charges",
  "outbox-retention": "outbox",
  "outbox-gauges": "outbox",
  completer: "idempotency_keys",
};

test.each(JOB_NAMES.map((job) => [job]))("two relays, one database: while relay A runs %s, relay B skips it", async (job) => {
  const a = relayPool("charges-relay-a");
  const b = relayPool("charges-relay-b");
  const release = await lockTable(TABLE_OF[job]);

  // A takes the job's lock, then waits inside the job on the table: it is running the job.
  const runA = runJob(job, a, config, newGauges(), silentLogger);
  await waitForBackendOnLock(db.sql, "charges-relay-a");
  expect(await runJob(job, b, config, newGauges(), silentLogger)).toEqual({ job, skipped: true });

  await release();
  const resultA = await runA;
  expect(resultA.job).toBe(job);
  expect(resultA).not.toHaveProperty("skipped");
  // The lock went with A's run: B gets it on the next round.
  expect(await runJob(job, b, config, newGauges(), silentLogger)).not.toHaveProperty("skipped");
});

test("the relay's loop skips a job whose lock another process holds (debug line) and runs the others", async () => {
  const release = await holdJobLock("outbox-retention");
  const lines: Array<{ msg: string; job?: string }> = [];
  const log = createLogger("debug", "relay", (line) => lines.push(JSON.parse(line)));
  const gauges = newGauges();
  const loop = startOpsLoop(relayPool("charges-relay-loop"), config, gauges, log);
  cleanups.push(() => loop.stop());
  // outbox-gauges runs after outbox-retention in every round.
  await waitUntil(() => gauges.computedAt["outbox-gauges"] !== undefined, 10_000, "the loop's first round");
  await loop.stop();
  await release();
  const skipped = lines.filter((l) => l.msg.startsWith("ops job skipped")).map((l) => l.job);
  expect(skipped).toEqual(["outbox-retention"]);
  expect(gauges.computedAt["stale-keys"]).toBeDefined();
  expect(gauges.computedAt.reconcile).toBeDefined();
});

test("the relay's loop runs a retention job again at once while its runs stop at their batch bound, not an interval later", async () => {
  const backlog = MAX_BATCHES_PER_RUN * DELETE_BATCH + 500;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, response_status, response_body, expires_at)
               select gen_random_uuid()::text, 'POST /backlog', 'h', 'COMPLETED', 201, '{}', now() - interval '1 minute'
                 from generate_series(1, ${backlog})`;
  const runs: Array<{ deleted: number; batches: number }> = [];
  const log = createLogger("info", "relay", (line) => {
    const entry = JSON.parse(line) as { msg: string; deleted?: number; batches?: number };
    if (entry.msg === "idempotency keys tombstoned and tombstones deleted") runs.push({ deleted: entry.deleted ?? 0, batches: entry.batches ?? 0 });
  });
  // Without a tombstone window each batch's tombstones go in the same batch: the backlog empties.
  const loop = startOpsLoop(relayPool("charges-relay-backlog"), loadConfig({ DATABASE_URL: db.url, IDEMPOTENCY_TOMBSTONE_SECONDS: "0" }), newGauges(), log);
  cleanups.push(() => loop.stop());
  // Far inside key-retention's 60 s interval: only a run due at once gets there in time.
  await waitUntil(async () => (await db.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where endpoint = 'POST /backlog'`)[0]!.n === 0, 45_000, "the whole backlog deleted");
  await loop.stop();
  expect(runs.slice(0, 2)).toEqual([{ deleted: MAX_BATCHES_PER_RUN * DELETE_BATCH, batches: MAX_BATCHES_PER_RUN }, { deleted: 500, batches: 1 }]);
});

test("bun run ops <job> while a relay runs it prints skipped and exits 0", async () => {
  await holdJobLock("key-retention");
  const run = await runToExit(["bun", "run", "--silent", "ops", "key-retention"], { DATABASE_URL: db.url, LOG_LEVEL: "warn" });
  expect(run.code).toBe(0);
  expect(JSON.parse(run.stdout)).toEqual({ job: "key-retention", skipped: true });
});

test("idempotency_stale_started_oldest_age_seconds on /metrics: the oldest stale STARTED key's age; a relay that skipped the job reports no value", async () => {
  await db.sql`truncate idempotency_keys`;
  await db.sql`insert into idempotency_keys (key, endpoint, request_hash, status, created_at, expires_at) values
               ('stuck-old', 'POST /charges', 'h', 'STARTED', now() - interval '20 minutes', now() + interval '1 hour'),
               ('stuck', 'POST /charges', 'h', 'STARTED', now() - interval '10 minutes', now() + interval '1 hour')`;
  const telemetry = startTelemetry("ops-locks-test", undefined, false);
  cleanups.push(() => telemetry.shutdown());
  const gauges = newGauges();
  registerOpsGauges(gauges, telemetry.provider.getMeter("charges"));
  const scrape = async () => (await telemetry.scrape()).text();

  // Never computed here (another relay holds the job): the series is absent, not a stale 0.
  const release = await holdJobLock("stale-keys");
  expect(await runJob("stale-keys", db.sql, config, gauges, silentLogger)).toEqual({ job: "stale-keys", skipped: true });
  expect(await scrape()).not.toMatch(/^idempotency_stale_started_oldest_age_seconds /m);
  await release();

  await runJob("stale-keys", db.sql, config, gauges, silentLogger);
  const text = await scrape();
  expect(text).toMatch(/^idempotency_stale_started_keys 2$/m);
  const age = Number(/^idempotency_stale_started_oldest_age_seconds ([\d.e+]+)$/m.exec(text)?.[1]);
  expect(age).toBeGreaterThanOrEqual(20 * 60);
  expect(age).toBeLessThan(30 * 60);
});

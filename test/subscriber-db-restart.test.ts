// The reference subscriber (examples/reference-subscriber.ts, a real process) when its database server
// crashes under an open inbox transaction: a private Postgres stopped in immediate mode while
// the subscriber's inbox insert waits on a row lock the test holds, then started again on the
// same port. The process must stay up, retry, and process the event once. And the shared
// transaction() under it: work that sends a statement after its connection was lost.
import { afterAll, afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { buildEnvelope, CHARGE_CREATED, topicOf } from "../lib/charges/events.ts";
import { createSql, type Sql } from "../lib/platform/db.ts";
import { transaction } from "../lib/platform/tx.ts";
import { createScratchDatabase, scratchName, waitForBackendOnLock } from "../testkit/database.ts";
import { rawClient } from "../testkit/mqtt.ts";
import { privatePostgres, type PrivatePostgres } from "../testkit/private-postgres.ts";
import { spawnSubscriber } from "../testkit/subscriber.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

// initdb, two server starts (one with crash recovery) and a subscriber start, on a loaded machine.
setDefaultTimeout(120_000);
// Steps that take a moment on a loaded machine (a transaction beginning, resuming).
const READY_TIMEOUT_MS = 20_000;
// The subscriber retries a database that is away with pauses doubling up to 5 s.
const RECOVERY_TIMEOUT_MS = 30_000;

const { mqttUrl } = await services();
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

const pg: PrivatePostgres = await privatePostgres();
const db = await createScratchDatabase(pg.url, scratchName("test", "subscriber_restart"), { max: 2 });
await db.sql`create table late_writes (n int not null)`;
afterAll(async () => {
  await db.sql.end({ timeout: 1 }).catch(() => {});
  await pg.remove();
});

/** A pool the test closes at the end. */
function pool(max: number): Sql {
  const sql = createSql(db.url, { max, applicationName: "test-late-writes" });
  cleanups.push(() => sql.end({ timeout: 1 }));
  return sql;
}

/** Waits until the server answers on `sql` again (its pool reconnects by itself). */
function answering(sql: Sql): Promise<boolean> {
  return waitUntil(() => sql`select 1`.then(() => true, () => false), RECOVERY_TIMEOUT_MS, "the restarted server to answer", 100);
}

test("Postgres stopped in immediate mode under the subscriber's open inbox transaction and started again: the process stays up and processes the event once", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const consumer = `test-restart-${crypto.randomUUID().slice(0, 8)}`;
  const eventId = crypto.randomUUID();
  const { child, lines } = await spawnSubscriber({ databaseUrl: db.url, mqttUrl, prefix, consumer });
  cleanups.push(() => child.stop());

  // Our uncommitted inbox row for the event: the subscriber's insert of the same row waits on
  // it, inside the subscriber's transaction, until the server goes away.
  const holder = await db.sql.reserve();
  await holder`begin`;
  await holder`insert into inbox (event_id, consumer) values (${eventId}::uuid, ${consumer})`;
  const publisher = await rawClient(mqttUrl);
  cleanups.push(() => publisher.endAsync());
  const envelope = buildEnvelope({ id: eventId, type: CHARGE_CREATED, aggregateId: crypto.randomUUID(), tenantId: "tenant-a", createdAt: new Date().toISOString(), sequence: 1, data: { amountCents: 100 } });
  await publisher.publishAsync(topicOf(prefix, CHARGE_CREATED), envelope, { qos: 1 });
  await waitForBackendOnLock(db.sql, `charges-subscriber-${consumer}`);

  // The crash takes our transaction with it (never touched again: its connection is gone).
  await pg.stopImmediately();
  await pg.start();

  await waitUntil(() => {
    if (child.exited) throw new Error(`the subscriber exited with ${child.exitCode}: ${child.output()}`);
    return lines.some((l) => l.event === "received" && l.id === eventId);
  }, RECOVERY_TIMEOUT_MS, "the event processed after the restart");
  expect(lines.filter((l) => l.event === "received")).toEqual([expect.objectContaining({ id: eventId, duplicate: false })]);

  const check = createSql(db.url, { max: 1 });
  cleanups.push(() => check.end());
  const rows = await check<{ consumer: string }[]>`select consumer from inbox where event_id = ${eventId}::uuid`;
  expect(rows.map((r) => r.consumer)).toEqual([consumer]);
  expect(await child.stop()).toBe(0);
});

/** A transaction on a pool of one that writes, waits for `gate`, then writes again. */
function gatedTransaction(sql: Sql, n: number, gate: Promise<void>) {
  const state = { began: false, resumed: false };
  const outcome = transaction(sql, async (tx) => {
    await tx`insert into late_writes (n) values (${n})`;
    state.began = true;
    await gate;
    state.resumed = true;
    await tx`insert into late_writes (n) values (${n + 1})`;
    return "committed";
  }).then((value) => value, (error: unknown) => error);
  return { state, outcome };
}

test("transaction(): work resuming after its connection was lost sends nothing, neither on the dead connection (the process survives) nor on the pool's new one", async () => {
  // Pools of one: the transaction's connection is the one the pool reopens after the restart.
  const [downSql, upSql] = [pool(1), pool(1)];
  let openWhileDown = (): void => {};
  let openAfterRestart = (): void => {};
  const whileDown = gatedTransaction(downSql, 10, new Promise((resolve) => (openWhileDown = resolve)));
  const afterRestart = gatedTransaction(upSql, 20, new Promise((resolve) => (openAfterRestart = resolve)));
  await waitUntil(() => whileDown.state.began && afterRestart.state.began, READY_TIMEOUT_MS, "both transactions to begin");

  await pg.stopImmediately();
  // Each transaction rejects once its client has seen the connection close.
  expect(await whileDown.outcome).toMatchObject({ code: "CONNECTION_CLOSED" });
  expect(await afterRestart.outcome).toMatchObject({ code: "CONNECTION_CLOSED" });
  openWhileDown();
  await waitUntil(() => whileDown.state.resumed, READY_TIMEOUT_MS, "the first transaction to resume");
  await pg.start();
  await answering(downSql);
  await answering(upSql);
  openAfterRestart();
  await waitUntil(() => afterRestart.state.resumed, READY_TIMEOUT_MS, "the second transaction to resume");

  // Had the late statements been sent, each would be ahead of this one on its pool's only connection.
  const counts = await Promise.all([downSql, upSql].map((sql) => sql<{ n: number }[]>`select count(*)::int as n from late_writes`));
  expect(counts.map(([row]) => row?.n)).toEqual([0, 0]);
});

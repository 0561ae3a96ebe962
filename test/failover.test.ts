// DATABASE_URL with a primary and its standby (a private pair, testkit/postgres-pair.ts): the
// pools keep their connections on the server that accepts writes. A standby listed first is
// skipped; a planned switchover (the old primary fenced read-only, then the standby promoted)
// is followed by the API, the relay and the subscriber, whose writes the fenced server refuses
// with 25006: 503s meanwhile, never a 500, and no pool left on the read-only server.
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { createSql, type Sql } from "../lib/platform/db.ts";
import type { ApiProcess } from "../lib/api/start.ts";
import { postCharge, startTestApi } from "../testkit/api.ts";
import { createScratchDatabase, scratchName, withDatabase } from "../testkit/database.ts";
import { postgresPair, serverProgramsInstalled, type PostgresPair } from "../testkit/postgres-pair.ts";
import { RELAY_APP, startEntrypoint } from "../testkit/processes.ts";
import { valueOf } from "../testkit/prometheus.ts";
import { services } from "../testkit/services.ts";
import { spawnSubscriber } from "../testkit/subscriber.ts";
import { waitUntil } from "../testkit/wait.ts";

// initdb, a base backup, two starts, a relay and a subscriber, on a loaded 2-core machine.
setDefaultTimeout(180_000);
// Drops of a read-only pool come at most one a second (lib/platform/read-only.ts), and a dropped
// connection may land on the fenced server once more before the next host: seconds.
const FOLLOW_TIMEOUT_MS = 60_000;
// Charges after the switchover that must succeed, each a new key.
const AFTER = 5;

const installed = serverProgramsInstalled();
if (!installed) console.warn("test/failover.test.ts skipped: a primary and standby pair needs Postgres's server programs, pg_basebackup among them (apt-get install postgresql)");
const paired = test.skipIf(!installed);

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

async function pairWithDatabase(): Promise<{ pair: PostgresPair; name: string }> {
  const pair = await postgresPair({ synchronous: true });
  cleanups.push(() => pair.remove());
  const db = await createScratchDatabase(pair.primary.url, scratchName("test", "failover"));
  await db.sql.end({ timeout: 1 });
  // Synchronous means flushed on the standby, not yet replayed: a connection to it may come first.
  const standby = pool(pair.standby.url);
  await waitUntil(async () => (await standby`select 1 from pg_database where datname = ${db.name}`).length > 0, 10_000, "the standby to replay the new database");
  return { pair, name: db.name };
}

function pool(url: string): Sql {
  const sql = createSql(url, { max: 4, applicationName: "test-failover" });
  cleanups.push(() => sql.end({ timeout: 1 }));
  return sql;
}

paired("target_session_attrs=read-write with the standby listed first: every connection goes to the primary and writes", async () => {
  const { pair, name } = await pairWithDatabase();
  const sql = pool(pair.listUrl(name, { standbyFirst: true }));
  // Four at once: each opens a connection of its own, and each tries the standby first.
  const rows = await Promise.all(Array.from({ length: 4 }, () => sql<{ port: number }[]>`
    insert into inbox (consumer, event_id) values ('test', gen_random_uuid()) returning inet_server_port() as port`));
  expect(rows.map((r) => r[0]!.port)).toEqual(Array(4).fill(pair.primary.port));
});

paired("target_session_attrs=any (libpq's default, which postgres.js refuses by name) and another parameter: the pool connects", async () => {
  const { adminDatabaseUrl } = await services();
  const url = new URL(adminDatabaseUrl);
  url.searchParams.set("target_session_attrs", "any");
  url.searchParams.set("application_name", "test-failover-any");
  const sql = pool(url.toString());
  const [row] = await sql<{ name: string }[]>`select current_setting('application_name') as name`;
  expect(row?.name).toBe("test-failover-any");
});

interface Answer {
  readonly status: number;
  readonly contentType: string;
  readonly retryAfter: string | null;
  readonly id: string | undefined;
}

async function charge(api: ApiProcess): Promise<Answer> {
  const r = await postCharge(api, JSON.stringify({ amountCents: 100 }), { key: `"${crypto.randomUUID()}"` });
  const body = await r.text();
  const id = r.status === 201 ? (JSON.parse(body) as { id: string }).id : undefined;
  return { status: r.status, contentType: r.headers.get("content-type") ?? "", retryAfter: r.headers.get("retry-after"), id };
}

paired("a switchover (the primary fenced read-only, the standby promoted): 503s meanwhile, then the API, the relay and the subscriber write on the new primary", async () => {
  const { pair, name } = await pairWithDatabase();
  const url = pair.listUrl(name);
  const { mqttUrl } = await services();
  const prefix = `test/${crypto.randomUUID()}/`;
  const api = await startTestApi(url);
  cleanups.push(() => api.close());
  const relay = await startEntrypoint("relay", { env: { DATABASE_URL: url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, OUTBOX_POLL_MS: "250", LOG_LEVEL: "warn" } });
  cleanups.push(() => relay.child.stop());
  const sub = await spawnSubscriber({ databaseUrl: url, mqttUrl, prefix, consumer: `test-failover-${crypto.randomUUID().slice(0, 8)}` });
  cleanups.push(() => sub.child.stop());
  const answers: Answer[] = [];
  const send = async (): Promise<Answer> => {
    const a = await charge(api);
    answers.push(a);
    return a;
  };
  expect((await send()).status).toBe(201);
  const primary = pool(withDatabase(pair.primary.url, name));
  // The fence: every session of the old primary refuses writes from its next transaction on.
  await primary`alter system set default_transaction_read_only = on`;
  await primary`select pg_reload_conf()`;
  const [fence] = await primary<{ at: Date }[]>`select now() as at`;
  await waitUntil(async () => (await send()).status === 503, FOLLOW_TIMEOUT_MS, "a write refused by the fenced primary");
  // As an operator's switchover does: the transactions begun before the fence end, their
  // commits replicated, before the promotion. A commit still waiting for the standby then
  // would wait for good (a synchronous standby that is gone), the subscriber's among them.
  await waitUntil(async () => {
    const [left] = await primary<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = ${name} and pid <> pg_backend_pid()
         and ((xact_start is not null and xact_start < ${fence!.at}) or wait_event = 'SyncRep')`;
    return left?.n === 0;
  }, FOLLOW_TIMEOUT_MS, "the transactions begun before the fence to end, replicated");
  await pair.promoteStandby();

  const after: Answer[] = [];
  await waitUntil(async () => {
    const a = await send();
    if (a.status === 201) after.push(a);
    return after.length >= AFTER;
  }, FOLLOW_TIMEOUT_MS, `${AFTER} charges after the promotion`, 50);
  const other = answers.filter((a) => a.status !== 201 && !(a.status === 503 && a.retryAfter !== null && a.contentType.startsWith("application/problem+json")));
  expect(other).toEqual([]);

  // Written on the promoted server, and delivered from it: the relay claimed them there, and the
  // subscriber's inbox rows are there too.
  const promoted = pool(withDatabase(pair.standby.url, name));
  const ids = after.map((a) => a.id!);
  const events = await promoted<{ id: string }[]>`select id::text from outbox where aggregate_id = any(${ids}::uuid[])`;
  expect(events).toHaveLength(AFTER);
  await waitUntil(() => events.every((e) => sub.lines.some((l) => l.event === "received" && l.id === e.id)), FOLLOW_TIMEOUT_MS, "their events at the subscriber");
  const [inbox] = await promoted<{ n: number }[]>`select count(*)::int as n from inbox where event_id = any(${events.map((e) => e.id)}::uuid[])`;
  expect(inbox!.n).toBe(AFTER);
  expect(relay.child.exited || sub.child.exited).toBe(false);
});

paired("the primary gone and the standby not promoted: a relay SIGTERMed then exits 1 after RELAY_SHUTDOWN_GRACE_MS, saying so", async () => {
  const { pair, name } = await pairWithDatabase();
  const { mqttUrl } = await services();
  const grace = 2000;
  const relay = await startEntrypoint("relay", {
    env: { DATABASE_URL: pair.listUrl(name), MQTT_URL: mqttUrl, RELAY_SHUTDOWN_GRACE_MS: String(grace), OUTBOX_POLL_MS: "50", LOG_LEVEL: "warn" },
    stdout: "tail",
  });
  cleanups.push(() => relay.child.stop());
  await pair.crashPrimary();
  // postgres.js now tries the standby (not a primary: refused), then the primary (gone), then
  // the standby again, for good: a batch's transaction begun now waits for a connection that
  // never comes (db_client_connections_busy counts transactions begun and not settled).
  const busy = async () => valueOf(await (await fetch(`${relay.base}/metrics`)).text(), "db_client_connections_busy", { db_client_connection_pool_name: RELAY_APP }) ?? 0;
  await waitUntil(async () => (await fetch(`${relay.base}/readyz`)).status === 503 && (await busy()) >= 1, FOLLOW_TIMEOUT_MS, "a batch waiting for a connection");
  const started = performance.now();
  relay.child.kill("SIGTERM");
  expect(await relay.child.done).toBe(1);
  expect(performance.now() - started).toBeGreaterThanOrEqual(grace);
  expect(relay.child.output()).toContain("stopping took longer than RELAY_SHUTDOWN_GRACE_MS");
});

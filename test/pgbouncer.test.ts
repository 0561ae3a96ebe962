// The real processes (bun api.ts, bun relay.ts, the subscriber, bun run ops) behind PgBouncer
// in transaction mode (a private one: testkit/pgbouncer.ts) with DATABASE_POOLER=transaction,
// with and without DATABASE_DIRECT_URL: charges, refunds and replays, every event at the
// subscriber, the relay woken by NOTIFY over the direct URL or polling without it, the ops
// jobs' locks, and each process's start-up line. What breaks without the setting:
// test/pgbouncer-sessions.test.ts.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { JOBS } from "../lib/ops/jobs.ts";
import { authEnv, authHeaders } from "../testkit/auth.ts";
import { pgbouncerBinary, privatePgbouncer, type PrivatePgbouncer } from "../testkit/pgbouncer.ts";
import { runToExit, startEntrypoint, type Service } from "../testkit/processes.ts";
import { freshDatabase, services, type TestDatabase } from "../testkit/services.ts";
import { spawnSubscriber, type SubscriberLine } from "../testkit/subscriber.ts";
import type { Child } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(60_000);

const installed = pgbouncerBinary() !== undefined;
if (!installed) console.warn("test/pgbouncer.test.ts skipped: `pgbouncer` is not installed (apt-get install -y pgbouncer; .ci/run installs it)");
const behind = test.skipIf(!installed);
const { mqttUrl } = await services();

// No poll in the test's time: only a NOTIFY can wake a relay that has LISTEN.
const NO_POLL_MS = "3600000";

/** `url` with a password: PgBouncer (trust) and a trust server ignore it; it must never be printed. */
function withPassword(url: string, password: string): string {
  const parsed = new URL(url);
  parsed.password = password;
  return parsed.toString();
}

interface Running {
  readonly db: TestDatabase;
  readonly bouncer: PrivatePgbouncer;
  readonly env: Record<string, string>;
  readonly password: string;
  readonly api: Service;
  readonly relay: Service;
  readonly subscriber: { child: Child; lines: SubscriberLine[] };
  /** The JSON lines api.ts and relay.ts printed. */
  readonly logs: { api: Array<{ msg: string }>; relay: Array<{ msg: string }> };
}

async function startAll(label: string, direct: boolean): Promise<Running> {
  const db = await freshDatabase(label);
  const password = new URL(db.url).password || `s3cret-${crypto.randomUUID().slice(0, 8)}`;
  const bouncer = await privatePgbouncer(db.url, { poolSize: 10 });
  const env: Record<string, string> = {
    DATABASE_URL: withPassword(bouncer.urlFor(db.url), password),
    DATABASE_POOLER: "transaction",
    ...(direct && { DATABASE_DIRECT_URL: withPassword(db.url, password), OUTBOX_POLL_MS: NO_POLL_MS }),
    MQTT_URL: mqttUrl,
    MQTT_TOPIC_PREFIX: `test/${crypto.randomUUID()}/`,
    LOG_LEVEL: "info",
  };
  const logs = { api: [] as Array<{ msg: string }>, relay: [] as Array<{ msg: string }> };
  const keep = (into: Array<{ msg: string }>) => (line: string) => void (line.startsWith("{") && into.push(JSON.parse(line) as { msg: string }));
  const api = await startEntrypoint("api", { env: { ...env, ...authEnv() }, stdout: keep(logs.api) });
  const relay = await startEntrypoint("relay", { env, stdout: keep(logs.relay) });
  const subscriber = await spawnSubscriber({ databaseUrl: env.DATABASE_URL!, mqttUrl, prefix: env.MQTT_TOPIC_PREFIX!, consumer: `pgb-${label}`, env });
  return { db, bouncer, env, password, api, relay, subscriber, logs };
}

async function stopAll(r: Running | undefined): Promise<void> {
  if (!r) return;
  await Promise.all([r.api.child.stop(), r.relay.child.stop(), r.subscriber.child.stop()]);
  await r.bouncer.stop();
  await r.db.drop();
}

async function post(r: Running, path: string, body: unknown, key: string): Promise<Response> {
  return fetch(`${r.api.base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key, ...(await authHeaders()) },
    body: JSON.stringify(body),
  });
}

describe.each([
  ["with DATABASE_DIRECT_URL", true],
  ["without DATABASE_DIRECT_URL", false],
])("behind PgBouncer (transaction mode), %s", (_label, direct) => {
  let r: Running | undefined;
  beforeAll(async () => {
    if (installed) r = await startAll(direct ? "pgbouncer_direct" : "pgbouncer_polled", direct);
  });
  afterAll(() => stopAll(r));

  behind("each process prints one start-up line on how it reaches Postgres, passwords masked", async () => {
    const { logs, subscriber, password } = r!;
    const line = (lines: Array<{ msg: string }>) => lines.filter((l) => l.msg.startsWith("database:"));
    // Printed as they start serving: the pipes may bring the lines a little after the readiness answer.
    await waitUntil(() => line(logs.api).length > 0 && line(logs.relay).length > 0 && subscriber.child.output().includes("database:"), 10_000, "the start-up lines");
    expect(line(logs.api)).toHaveLength(1);
    expect(line(logs.api)[0]?.msg).toBe("database: via a pooler in transaction mode (unnamed statements, time bounds set per transaction)");
    expect(line(logs.relay)).toHaveLength(1);
    const relayLine = line(logs.relay)[0]?.msg;
    if (direct) expect(relayLine).toEndWith("; LISTEN and ops job locks via DATABASE_DIRECT_URL");
    else expect(relayLine).toEndWith("; polling the outbox every 100 ms (no LISTEN without DATABASE_DIRECT_URL); ops job locks per transaction");
    const subscriberOutput = subscriber.child.output();
    expect(subscriberOutput).toContain(direct ? "the inbox retention's lock via DATABASE_DIRECT_URL" : "the inbox retention's lock per transaction");
    const printed = [JSON.stringify(logs.api), JSON.stringify(logs.relay), subscriberOutput].join("\n");
    expect(printed).toContain("***");
    expect(printed).not.toContain(password);
  });

  behind("charges, refunds and their replays answer as on a direct connection, and every event reaches the subscriber", async () => {
    const { api, db, subscriber } = r!;
    const chargeKey = crypto.randomUUID();
    const created = await post(r!, "/charges", { amountCents: 5000 }, chargeKey);
    expect(created.status).toBe(201);
    const charge = (await created.json()) as { id: string };
    const replay = await post(r!, "/charges", { amountCents: 5000 }, chargeKey);
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(((await replay.json()) as { id: string }).id).toBe(charge.id);

    const refundKey = crypto.randomUUID();
    const refunded = await post(r!, `/charges/${charge.id}/refunds`, { amountCents: 1200 }, refundKey);
    expect(refunded.status).toBe(201);
    const refundReplay = await post(r!, `/charges/${charge.id}/refunds`, { amountCents: 1200 }, refundKey);
    expect(refundReplay.headers.get("idempotent-replayed")).toBe("true");
    const view = await fetch(`${api.base}/charges/${charge.id}`, { headers: await authHeaders() });
    expect(await view.json()).toMatchObject({ id: charge.id, amountCents: 5000, refundedCents: 1200 });

    const events = (await db.sql<{ id: string }[]>`select id from outbox where aggregate_id = ${charge.id}::uuid`).map((e) => e.id);
    expect(events).toHaveLength(2);
    await waitUntil(() => events.every((id) => subscriber.lines.some((l) => l.event === "received" && l.id === id)), 20_000, "both events at the subscriber");
    const inbox = await db.sql<{ id: string }[]>`select event_id::text as id from inbox order by id`;
    expect(inbox.map((row) => row.id)).toEqual(events.sort());
  });

  behind(direct ? "the relay LISTENs over DATABASE_DIRECT_URL: woken by the API's NOTIFY through the pooler, with no poll in the test's time" : "the relay polls: no LISTEN anywhere", async () => {
    const { db, subscriber } = r!;
    const listening = async () => {
      const rows = await db.sql<{ app: string }[]>`
        select application_name as app from pg_stat_activity where datname = current_database() and query ilike 'listen %'`;
      return rows.map((row) => row.app);
    };
    if (direct) expect(await waitUntil(async () => (await listening()).length > 0 && listening(), 10_000, "the relay's LISTEN")).toEqual(["charges-relay-direct"]);
    else expect(await listening()).toEqual([]);
    const created = await post(r!, "/charges", { amountCents: 700 }, crypto.randomUUID());
    const { id } = (await created.json()) as { id: string };
    const [event] = await db.sql<{ id: string }[]>`select id from outbox where aggregate_id = ${id}::uuid`;
    await waitUntil(() => subscriber.lines.some((l) => l.event === "received" && l.id === event?.id), 20_000, "the event at the subscriber");
  });

  behind("the ops jobs' locks: the relay's loop runs them, bun run ops runs one and skips one another session holds", async () => {
    const { db, env, relay, password } = r!;
    // outbox-gauges comes last in a round: the relay's first round is over, its next outbox-retention minutes away.
    await waitUntil(async () => /^outbox_pending_events /m.test(await (await fetch(`${relay.base}/metrics`)).text()), 20_000, "the relay's ops loop to compute its gauges");
    const ops = () => runToExit(["bun", "run", "--silent", "ops", "outbox-retention"], env);
    const ran = await ops();
    expect(ran.code).toBe(0);
    expect(JSON.parse(ran.stdout)).toEqual({ job: "outbox-retention", deleted: 0, batches: 1 });
    expect(ran.stderr).toContain(direct ? "; job locks via DATABASE_DIRECT_URL" : "; job locks per transaction");
    expect(ran.stderr).not.toContain(password);
    const lockId = JOBS["outbox-retention"].lockId.toString();
    const holder = await db.sql.reserve();
    try {
      const [held] = await holder<{ locked: boolean }[]>`select pg_try_advisory_lock(${lockId}::bigint) as locked`;
      expect(held?.locked).toBe(true);
      expect(JSON.parse((await ops()).stdout)).toEqual({ job: "outbox-retention", skipped: true });
    } finally {
      await holder`select pg_advisory_unlock(${lockId}::bigint)`;
      holder.release();
    }
  });
});

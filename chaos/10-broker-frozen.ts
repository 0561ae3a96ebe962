// Scenario 10: the broker freezes with publishes in flight, then dies. A private Mosquitto is
// SIGSTOPped: the relay's TCP connection stays open, its PUBLISHes keep going into it, no
// PUBACK ever comes back. Then it is SIGKILLed (nothing saved, nothing said: no DISCONNECT)
// and started again on the same port. Proves the relay's side of at-least-once: a row is
// marked published only on its PUBACK, so every row whose publish never got one is published
// again after the restart, and none is lost; the relay and the subscriber come back by
// themselves, neither restarted.
// Deterministic without sleeps:
//  - The freeze comes at a quiet moment (load paused, every row published and delivered, no
//    batch open), then the load resumes: the relay's next batch claims the new rows and
//    publishes them to the frozen broker. A batch open at the freeze would hold its lane for
//    the relay's publish timeout (10 s per row published in turn) and its rows may or may not
//    have been acknowledged; rows created after the freeze cannot have been.
//  - "In flight" is observed, not assumed: a row the relay has claimed is locked by its open
//    batch transaction, so the row's xmax is that backend's backend_xid (pg_stat_activity).
//    The kill comes once the relay holds rows created after the freeze.
//  - What a SIGKILLed broker loses is kept out of the measure: the subscriber's session is
//    saved beforehand (SIGUSR1 writes mosquitto.db), so after the restart the broker queues
//    the republished events for it whether the subscriber or the relay reconnects first; and
//    at the freeze the broker holds no acknowledged event the subscriber has not processed.
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Sql } from "../lib/platform/db.ts";
import { privateMosquitto } from "../testkit/mosquitto.ts";
import { RELAY_APP } from "../testkit/processes.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { postUntilFinal } from "./lib/client.ts";
import { deliveryInvariants, scenario } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const WORKERS = 4;
// Pacing, so the reference subscriber (one inbox transaction per event) keeps up.
const PAUSE_MS = 40;
// Phases: events published before the freeze, and after the restart.
const PUBLISHED_BEFORE = 30;
const PUBLISHED_AFTER = 30;
// Bounds a phase whose condition never comes; the checks below then report it.
const PHASE_TIMEOUT_MS = 20_000;
// No cap on events in flight to the subscriber, and a queue that never drops one: every event
// the broker acknowledges goes out to the subscriber at once.
const BROKER_CONFIG = "max_inflight_messages 0\nmax_queued_messages 100000";

/** Pending rows locked by an open relay batch (claimed, not settled), created after `since` when given. */
async function claimedRows(sql: Sql, since?: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select o.id::text from outbox o
      join pg_stat_activity a on a.backend_xid = o.xmax
     where a.datname = current_database() and a.application_name = ${RELAY_APP}
       and o.published_at is null
       and (${since ?? null}::timestamptz is null or o.created_at > ${since ?? null}::timestamptz)`;
  return rows.map((r) => r.id);
}

async function publishedIds(sql: Sql): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`select id::text from outbox where published_at is not null`;
  return rows.map((r) => r.id);
}

await scenario("10", "broker frozen mid-publish, then killed and restarted", async (ctx) => {
  const { sql, checks, tally } = ctx;
  const broker = await privateMosquitto(BROKER_CONFIG);
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer, broker.url);
  const sub = ctx.sub;
  // The subscriber's session (its subscription) on disk: the SIGKILLed broker comes back with it.
  broker.signal("SIGUSR1");
  await waitUntil(() => existsSync(join(broker.dir, "mosquitto.db")), PHASE_TIMEOUT_MS, "mosquitto to save its sessions");
  const relay = await startRelay(ctx.db.url, ctx.prefix, broker.url);

  let loading = true;
  let paused: Promise<void> | undefined;
  let resume: () => void = () => {};
  let busy = 0;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; loading; i++) {
      if (paused) await paused;
      busy += 1;
      await postUntilFinal(() => api.base, crypto.randomUUID(), 1 + w * 100_000 + i, tally, Date.now() + PHASE_TIMEOUT_MS);
      busy -= 1;
      await sleep(PAUSE_MS);
    }
  };
  const published = async (): Promise<number> => (await publishedIds(sql)).length;
  const quiet = async (): Promise<boolean> => {
    const [row] = await sql<{ pending: number }[]>`select count(*)::int as pending from outbox where published_at is null`;
    const ids = await publishedIds(sql);
    return busy === 0 && row?.pending === 0 && (await claimedRows(sql)).length === 0 && ids.every((id) => sub.arrivals.has(id));
  };

  let inFlight: string[] = [];
  let unseenAtKill: string[] = [];
  let restarted = false;
  let publishedAtRestart = 0;
  const phases = async (): Promise<void> => {
    try {
      await waitUntil(async () => (await published()) >= PUBLISHED_BEFORE, PHASE_TIMEOUT_MS, `${PUBLISHED_BEFORE} events published`);
      paused = new Promise((resolve) => (resume = resolve));
      await waitUntil(quiet, PHASE_TIMEOUT_MS, "every row published and delivered, no batch open");
      broker.signal("SIGSTOP");
      // Postgres's clock: a row whose transaction started after this was claimed after the freeze.
      const [frozen] = await sql<{ at: string }[]>`select clock_timestamp()::text as at`;
      paused = undefined;
      resume();
      inFlight = await waitUntil(async () => {
        const rows = await claimedRows(sql, frozen!.at);
        return rows.length > 0 ? rows : undefined;
      }, PHASE_TIMEOUT_MS, "the relay to publish rows to the frozen broker");
      const ids = await publishedIds(sql);
      unseenAtKill = ids.filter((id) => !sub.arrivals.has(id));
      await broker.kill();
      await broker.start();
      restarted = true;
      publishedAtRestart = await published();
      await waitUntil(async () => (await published()) >= publishedAtRestart + PUBLISHED_AFTER, PHASE_TIMEOUT_MS, "events after the restart")
        .catch(() => {}); // reported below
    } finally {
      loading = false;
      resume();
    }
  };
  await Promise.all([phases(), ...Array.from({ length: WORKERS }, (_, w) => worker(w))]);

  checks.check(inFlight.length > 0 && restarted,
    `the relay had ${inFlight.length} claimed row(s) published to the frozen broker when it was SIGKILLed and started again`);
  checks.check(unseenAtKill.length === 0, "when the broker was killed, the subscriber had every event the relay had marked published",
    `${unseenAtKill.length} marked published and never delivered`);
  const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS);
  const [again] = await sql<{ published: number }[]>`
    select count(*)::int as published from outbox where id = any(${inFlight}::uuid[]) and published_at is not null`;
  const notArrived = inFlight.filter((id) => !sub.arrivals.has(id)).length;
  checks.check(again?.published === inFlight.length && notArrived === 0,
    "every row in flight when the broker froze (no PUBACK) was published again and reached the subscriber",
    `${inFlight.length - (again?.published ?? 0)} not published, ${notArrived} never reached the subscriber`);
  const after = (await published()) - publishedAtRestart;
  checks.check(after >= PUBLISHED_AFTER, `the relay came back by itself: ${after} events published after the restart`, `${after}`);
  checks.check(!relay.exited, "the relay process stayed up (never restarted)", `exit ${relay.exitCode}`);
  checks.check(!sub.child.exited, "the subscriber stayed up and reconnected");
  const [parked] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where parked_at is not null`;
  checks.check((parked?.n ?? 0) === 0, "no row was parked by the freeze", `${parked?.n} parked`);
  checks.check(tally.count((a) => a.status >= 500 || a.status === 0) === 0, "the API never failed (it does not need the broker)");
  return totals;
});

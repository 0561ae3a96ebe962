// Scenario 12: the primary crashes and its synchronous standby is promoted under load. A private
// pair (testkit/postgres-pair.ts: a primary and a hot standby made with pg_basebackup, named in
// synchronous_standby_names) serves the real api.ts, relay.ts and subscriber, each given the
// list URL `primary,standby?target_session_attrs=read-write`. While clients keep writing
// charges, the standby is held back (what the primary streams goes no further), the primary is
// stopped in immediate mode (what it had streamed to the held link is lost with it), and once
// the clients have seen refusals the standby is promoted. Nothing is restarted but Postgres's
// role. Proves: no charge answered 201 is lost (synchronous replication: a commit the standby
// has not got is never acknowledged); during the switch every request is refused cleanly (a 503
// problem with Retry-After, or no answer; never a 500); the three processes find the promoted
// server by themselves; every charge is delivered and processed once.
// Deterministic without timing thresholds: the hold comes after a count of 201s, the crash once
// a commit waits for the standby (or, were replication asynchronous, once charges were answered
// while it was held), the promotion after a count of 503s, and the load stops after a count of
// 201s after it; each answer is judged by when it came relative to the crash and the promotion.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { createSql } from "../lib/platform/db.ts";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { postgresPair } from "../testkit/postgres-pair.ts";
import { API_APP, killAll, RELAY_APP } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { LOG_DIR, startApi, startRelay } from "./lib/harness.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";
import { FailoverLoad } from "./lib/failover-load.ts";

// Phases: charges before the hold, charges answered while the standby is held (only possible
// with asynchronous replication; the crash comes at the first commit that waits instead),
// refusals after the crash, charges after the promotion.
const CREATED_BEFORE = 30;
const ACKED_WHILE_HELD = 5;
// More than the clients (4): a refusal to each of them, the requests in flight at the crash too.
const REFUSED_DURING_SWITCH = 6;
const CREATED_AFTER = 30;
// Bounds a phase whose condition never comes; the checks below then report it, with the numbers.
// A refusal during the switch comes at the API's request deadline (10 s): room for two each.
const PHASE_TIMEOUT_MS = 30_000;
// The promise: 201s again this soon after the promotion. A request in flight waits up to its
// 10 s deadline, and the pools leave a read-only server within a second (lib/platform/read-only.ts).
const BACK_TO_201_MS = 15_000;

await scenario("12", "Postgres primary crashed and its synchronous standby promoted under load", async (outer) => {
  const { checks, tally } = outer;
  const pgLog = join(LOG_DIR, "postgres-pair.log");
  const pair = await postgresPair({ synchronous: true, log: (line) => appendFileSync(pgLog, `${line}\n`) });
  try {
    const db = await createScratchDatabase(pair.primary.url, scratchName("chaos", "12"), { migrate: false, applicationName: "chaos-harness" });
    await db.sql.end({ timeout: 2 });
    const url = pair.listUrl(db.name);
    // The harness reads through the list too: after the promotion it reads the new primary.
    const sql = createSql(url, { max: 4, applicationName: "chaos-harness" });
    const admin = createSql(pair.primary.url, { max: 1, applicationName: "chaos-harness" });
    const api = await startApi(url, outer.prefix);
    outer.sub = await startSubscriber(url, outer.prefix, outer.consumer);
    const relay = await startRelay(url, outer.prefix);
    const ctx: Ctx = { ...outer, db: { ...db, url, sql }, sql };
    const load = new FailoverLoad(api.base, tally);

    const at = { held: 0, gone: 0, promoting: 0, promoted: 0 };
    let syncState: string | undefined;
    let waitingOnStandby = 0;
    const phases = async (): Promise<void> => {
      try {
        await waitUntil(() => load.created(0) >= CREATED_BEFORE, PHASE_TIMEOUT_MS, `${CREATED_BEFORE} charges before the hold`);
        syncState = await pair.syncState();
        pair.holdReplication();
        at.held = performance.now();
        await waitUntil(async () => {
          waitingOnStandby = (await admin<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity where wait_event = 'SyncRep'`)[0]?.n ?? 0;
          return waitingOnStandby > 0 || load.created(at.held) >= ACKED_WHILE_HELD;
        }, PHASE_TIMEOUT_MS, "a commit waiting for the standby", 20).catch(() => {});
        await admin.end({ timeout: 1 });
        await pair.crashPrimary();
        at.gone = performance.now();
        await waitUntil(() => load.refusedAnswers(at.gone) >= REFUSED_DURING_SWITCH, PHASE_TIMEOUT_MS, `${REFUSED_DURING_SWITCH} refusals during the switch`)
          .catch(() => {});
        at.promoting = performance.now();
        await pair.promoteStandby();
        at.promoted = performance.now();
        await waitUntil(() => load.created(at.promoted) >= CREATED_AFTER, PHASE_TIMEOUT_MS, `${CREATED_AFTER} charges after the promotion`)
          .catch(() => {});
      } finally {
        load.stop();
      }
    };
    await Promise.all([phases(), load.run()]);

    checks.check(syncState === "sync", "the standby was synchronous when the load began", `sync_state ${syncState}`);
    checks.check(waitingOnStandby > 0, `the standby was held back before the crash (commits waiting for it: ${waitingOnStandby})`, "none waited");
    const ackedWhileHeld = load.created(at.held, at.gone);
    checks.check(ackedWhileHeld === 0, "no charge was answered 201 while the standby was held back (each commit waited for it)", `${ackedWhileHeld} answered`);
    checks.check(at.gone > 0 && at.promoted > 0, "the primary was stopped in immediate mode mid-load and the standby promoted");
    const during = load.answeredBetween(at.gone, at.promoting);
    const bad = during.filter((s) => s.status !== 0 && !(s.status === 503 && s.retryAfter !== null && s.contentType.startsWith("application/problem+json")));
    checks.check(during.length > 0 && bad.length === 0, `during the switch, every answer (${during.length}) was a 503 problem with Retry-After, or none`,
      `${bad.length} others: ${[...new Set(bad.map((s) => `${s.status} ${s.contentType}`))].join(", ")}`);
    const refused = during.filter((s) => s.status === 503).length;
    checks.check(refused >= REFUSED_DURING_SWITCH, `the API kept answering during the switch (${refused} 503s)`, `${refused} 503s, ${during.length - refused} without an answer`);
    checks.check(load.count((s) => s.status >= 500 && s.status !== 503) === 0 && load.count((s) => s.contentType.includes("html")) === 0,
      "no 500 and no HTML, ever");
    const after = load.created(at.promoted);
    checks.check(after >= CREATED_AFTER, `the API found the promoted server by itself: ${after} charges created after the promotion`, `${after}`);
    const first = load.firstCreatedAfter(at.promoted);
    const backIn = first === undefined ? undefined : Math.round(first - at.promoted);
    checks.check(backIn !== undefined && backIn <= BACK_TO_201_MS, `the API answered 201 again ${backIn ?? "?"} ms after the promotion (bound: ${BACK_TO_201_MS / 1000} s)`, `${backIn ?? "no"} ms`);
    checks.check(!api.child.exited && !relay.exited && !outer.sub.child.exited, "the API, the relay and the subscriber stayed up (never restarted)",
      `exit codes ${api.child.exitCode}, ${relay.exitCode}, ${outer.sub.child.exitCode}`);
    const unsettled = load.unsettledKeys();
    checks.check(unsettled === 0, `every key (${load.keys}) ended with a 201 after the client's resends`, `${unsettled} keys without one`);

    // Delivery needs the relay and the subscriber on the promoted server: rows written after it.
    const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS);
    const pools = await sql<{ name: string }[]>`
      select distinct application_name as name from pg_stat_activity
       where datname = current_database() and application_name in (${API_APP}, ${RELAY_APP}, ${`charges-subscriber-${outer.consumer}`})`;
    const [port] = await sql<{ port: number }[]>`select inet_server_port() as port`;
    checks.check(port?.port === pair.standby.port && pools.length === 3, "the API, the relay and the subscriber are connected to the promoted server",
      `${pools.map((p) => p.name).join(", ")} on port ${port?.port}`);
    checks.check(totals.charges === load.keys, "one charge per key, none lost in the failover", `${totals.charges} charges for ${load.keys} keys`);
    await sql.end({ timeout: 2 });
    return totals;
  } finally {
    // The processes go before their database servers.
    await killAll();
    await pair.remove();
  }
});

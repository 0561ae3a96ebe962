// Scenario 7: the database server crashes and comes back under load. A private Postgres (the
// embedded one, its own cluster and port) serves the real api.ts, relay.ts and subscriber;
// while clients keep writing charges, it is stopped in immediate mode (SIGQUIT, what
// `pg_ctl stop -m immediate` sends: every backend cut, no checkpoint, WAL replay at the next
// start) and started again on the same port and data directory. Nothing is restarted but
// Postgres. Proves: no accepted (201) charge is lost across the crash; while it is down every
// request is refused cleanly (a 503 problem with Retry-After, or no answer at all; never a
// 500, never HTML); the API and the relay reconnect by themselves; every charge is delivered
// and processed once.
// Deterministic without timing thresholds: the crash comes after a count of 201s, the server
// stays down until a count of 503s, the load stops after a count of 201s after the restart,
// and each answer is judged by its order relative to the outage (sent after the postmaster
// was gone and answered before the restart began: must be a refusal).
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { createScratchDatabase, scratchName } from "../testkit/database.ts";
import { killAll } from "../testkit/processes.ts";
import { privatePostgres } from "../testkit/private-postgres.ts";
import { waitUntil } from "../testkit/wait.ts";
import { LOG_DIR, startApi, startRelay } from "./lib/harness.ts";
import { FailoverLoad } from "./lib/failover-load.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

// Phases: charges created before the crash, refusals seen while down, charges after the restart.
const CREATED_BEFORE = 30;
const REFUSED_WHILE_DOWN = 12;
const CREATED_AFTER = 30;
// Bounds a phase whose condition never comes (the API hangs, or never recovers): the checks
// below then report it, with the numbers.
const PHASE_TIMEOUT_MS = 30_000;

await scenario("7", "Postgres stopped in immediate mode and restarted under load", async (outer) => {
  const { checks, tally } = outer;
  const pgLog = join(LOG_DIR, "postgres.log");
  const pg = await privatePostgres((line) => appendFileSync(pgLog, `${line}\n`));
  try {
    const db = await createScratchDatabase(pg.url, scratchName("chaos", "7"), { migrate: false, applicationName: "chaos-harness" });
    const api = await startApi(db.url, outer.prefix);
    outer.sub = await startSubscriber(db.url, outer.prefix, outer.consumer);
    const relay = await startRelay(db.url, outer.prefix);
    // The delivery checks read the private server's database.
    const ctx: Ctx = { ...outer, db, sql: db.sql };

    const load = new FailoverLoad(api.base, tally);
    const created = (since: number): number => load.created(since);
    const refused = (since: number): number => load.count((s) => s.status === 503 && s.sentAt > since);

    let goneAt = 0;
    let restartAt = 0;
    let upAt = 0;
    const phases = async (): Promise<void> => {
      try {
        await waitUntil(() => created(0) >= CREATED_BEFORE, PHASE_TIMEOUT_MS, `${CREATED_BEFORE} charges before the crash`);
        await pg.stopImmediately();
        goneAt = performance.now();
        await waitUntil(() => refused(goneAt) >= REFUSED_WHILE_DOWN, PHASE_TIMEOUT_MS, `${REFUSED_WHILE_DOWN} refusals while down`)
          .catch(() => {}); // reported below, with the numbers
        restartAt = performance.now();
        await pg.start();
        upAt = performance.now();
        await waitUntil(() => created(upAt) >= CREATED_AFTER, PHASE_TIMEOUT_MS, `${CREATED_AFTER} charges after the restart`)
          .catch(() => {});
      } finally {
        load.stop();
      }
    };
    await Promise.all([phases(), load.run()]);

    checks.check(goneAt > 0 && upAt > 0, "Postgres was stopped in immediate mode mid-load and started again on the same port");
    const down = load.sent.filter((s) => s.sentAt > goneAt && s.answeredAt < restartAt);
    const badDown = down.filter((s) => s.status !== 0 && !(s.status === 503 && s.retryAfter !== null && s.contentType.startsWith("application/problem+json")));
    checks.check(down.length > 0 && badDown.length === 0, `while it was down, every request (${down.length}) was refused: a 503 problem with Retry-After, or no answer`,
      `${badDown.length} other answers: ${[...new Set(badDown.map((s) => `${s.status} ${s.contentType}`))].join(", ")}`);
    const downRefused = down.filter((s) => s.status === 503).length;
    checks.check(downRefused >= REFUSED_WHILE_DOWN, `the API kept answering while it was down (${downRefused} 503s)`,
      `${downRefused} 503s, ${down.filter((s) => s.status === 0).length} without an answer`);
    const s500 = load.count((s) => s.status >= 500 && s.status !== 503);
    const html = load.count((s) => s.contentType.includes("html"));
    checks.check(s500 === 0 && html === 0, "no 500 and no HTML, ever", `${s500} 5xx other than 503, ${html} HTML`);
    const after = created(upAt);
    checks.check(after >= CREATED_AFTER, `the API reconnected by itself: ${after} charges created after the restart`, `${after} after the restart`);
    checks.check(!api.child.exited, "the API process stayed up (never restarted)", `exit code ${api.child.exitCode}`);
    checks.check(!relay.exited, "the relay process stayed up (never restarted)", `exit code ${relay.exitCode}`);
    checks.check(!outer.sub.child.exited, "the subscriber stayed up", `exit code ${outer.sub.child.exitCode}`);
    const unsettled = load.unsettledKeys();
    checks.check(unsettled === 0, `every key (${load.keys}) ended with a 201 after the client's resends`, `${unsettled} keys without one`);

    // The relay's recovery is proven by delivery: rows written after the restart need a live relay.
    const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS);
    checks.check(totals.charges === load.keys, "one charge per key, none lost in the crash", `${totals.charges} charges for ${load.keys} keys`);
    await db.sql.end({ timeout: 2 });
    return totals;
  } finally {
    // The processes go before their database server.
    await killAll();
    await pg.remove();
  }
});

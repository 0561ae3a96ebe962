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
import { sleep, waitUntil } from "../testkit/wait.ts";
import { LOG_DIR, startApi, startRelay } from "./lib/harness.ts";
import { chargeHeaders, Tally } from "./lib/client.ts";
import { deliveryInvariants, scenario, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

const WORKERS = 4;
// Pacing, so the reference subscriber (one inbox transaction per event) keeps up.
const PAUSE_MS = 60;
// A careful client's pause before it resends a refused request, with jitter.
const RETRY_BACKOFF_MS = 50;
const RETRY_JITTER_MS = 100;
// A client gives up on one request after this: far above the API's own request bound (10 s),
// so only a request the API never answers counts as "no answer".
const CLIENT_TIMEOUT_MS = 20_000;
// A key's resends stop after this; the outage lasts seconds.
const KEY_DEADLINE_MS = 60_000;
// Phases: charges created before the crash, refusals seen while down, charges after the restart.
const CREATED_BEFORE = 30;
const REFUSED_WHILE_DOWN = 12;
const CREATED_AFTER = 30;
// Bounds a phase whose condition never comes (the API hangs, or never recovers): the checks
// below then report it, with the numbers.
const PHASE_TIMEOUT_MS = 30_000;

interface Sent {
  readonly status: number; // 0 = no HTTP answer (refused, reset or timed out)
  readonly contentType: string;
  readonly retryAfter: string | null;
  readonly sentAt: number;
  readonly answeredAt: number;
}

const sent: Sent[] = [];

async function post(base: string, key: string, amountCents: number, tally: Tally): Promise<number> {
  const sentAt = performance.now();
  let status = 0;
  let replayed = false;
  let body = "";
  let contentType = "";
  let retryAfter: string | null = null;
  try {
    const r = await fetch(`${base}/charges`, {
      method: "POST",
      headers: await chargeHeaders(key),
      body: JSON.stringify({ amountCents }),
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    body = await r.text();
    status = r.status;
    replayed = r.headers.get("idempotent-replayed") === "true";
    contentType = r.headers.get("content-type") ?? "";
    retryAfter = r.headers.get("retry-after");
  } catch {
    // no answer
  }
  sent.push({ status, contentType, retryAfter, sentAt, answeredAt: performance.now() });
  tally.answers.push({ key, amountCents, status, replayed, body, at: Date.now() });
  return status;
}

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

    let loading = true;
    const finals = new Map<string, number>();
    const worker = async (w: number): Promise<void> => {
      for (let i = 0; loading; i++) {
        const key = crypto.randomUUID();
        const deadline = performance.now() + KEY_DEADLINE_MS;
        for (;;) {
          const status = await post(api.base, key, 1 + w * 100_000 + i, tally);
          finals.set(key, status);
          if (![0, 409, 503].includes(status) || performance.now() > deadline) break;
          await sleep(RETRY_BACKOFF_MS + Math.random() * RETRY_JITTER_MS);
        }
        await sleep(PAUSE_MS);
      }
    };
    const created = (since: number): number => sent.filter((s) => s.status === 201 && s.sentAt > since).length;
    const refused = (since: number): number => sent.filter((s) => s.status === 503 && s.sentAt > since).length;

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
        loading = false;
      }
    };
    await Promise.all([phases(), ...Array.from({ length: WORKERS }, (_, w) => worker(w))]);

    checks.check(goneAt > 0 && upAt > 0, "Postgres was stopped in immediate mode mid-load and started again on the same port");
    const down = sent.filter((s) => s.sentAt > goneAt && s.answeredAt < restartAt);
    const badDown = down.filter((s) => s.status !== 0 && !(s.status === 503 && s.retryAfter !== null && s.contentType.startsWith("application/problem+json")));
    checks.check(down.length > 0 && badDown.length === 0, `while it was down, every request (${down.length}) was refused: a 503 problem with Retry-After, or no answer`,
      `${badDown.length} other answers: ${[...new Set(badDown.map((s) => `${s.status} ${s.contentType}`))].join(", ")}`);
    const downRefused = down.filter((s) => s.status === 503).length;
    checks.check(downRefused >= REFUSED_WHILE_DOWN, `the API kept answering while it was down (${downRefused} 503s)`,
      `${downRefused} 503s, ${down.filter((s) => s.status === 0).length} without an answer`);
    const s500 = sent.filter((s) => s.status >= 500 && s.status !== 503).length;
    const html = sent.filter((s) => s.contentType.includes("html")).length;
    checks.check(s500 === 0 && html === 0, "no 500 and no HTML, ever", `${s500} 5xx other than 503, ${html} HTML`);
    const after = created(upAt);
    checks.check(after >= CREATED_AFTER, `the API reconnected by itself: ${after} charges created after the restart`, `${after} after the restart`);
    checks.check(!api.child.exited, "the API process stayed up (never restarted)", `exit code ${api.child.exitCode}`);
    checks.check(!relay.exited, "the relay process stayed up (never restarted)", `exit code ${relay.exitCode}`);
    checks.check(!outer.sub.child.exited, "the subscriber stayed up", `exit code ${outer.sub.child.exitCode}`);
    const unsettled = [...finals.values()].filter((status) => status !== 201).length;
    checks.check(unsettled === 0, `every key (${finals.size}) ended with a 201 after the client's resends`, `${unsettled} keys without one`);

    // The relay's recovery is proven by delivery: rows written after the restart need a live relay.
    const totals = await deliveryInvariants(ctx, PHASE_TIMEOUT_MS);
    checks.check(totals.charges === finals.size, "one charge per key, none lost in the crash", `${totals.charges} charges for ${finals.size} keys`);
    await db.sql.end({ timeout: 2 });
    return totals;
  } finally {
    // The processes go before their database server.
    await killAll();
    await pg.remove();
  }
});

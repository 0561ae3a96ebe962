// Scenario 9: lock storm. Under steady load (new keys, concurrent twins with one key, resends
// of answered keys), the harness takes ACCESS EXCLUSIVE on idempotency_keys, then in a second
// round on charges (what a migration's ALTER TABLE or a VACUUM FULL does), and holds it far
// longer than the API's lock and statement bounds. The API runs with small bounds so a round
// takes seconds. Proves: while a lock is held every request is answered 503 + Retry-After
// (none hangs); nothing is written behind a 503; the moment the lock goes, full service
// (no connection or pool slot lost to the refusals); each refused key, retried afterwards,
// creates its charge; and every charge is delivered once.
// Deterministic without timing thresholds: a round lasts until a count of refusals, and each
// answer is judged by its order relative to the lock (sent after it was granted and answered
// before its release began: must be a 503; sent after the release ended: must succeed).
import type { Sql } from "../lib/platform/db.ts";
import { waitForBackendOnLock } from "../testkit/database.ts";
import { API_APP, type Service } from "../testkit/processes.ts";
import { sleep, waitUntil } from "../testkit/wait.ts";
import { startApi, startRelay } from "./lib/harness.ts";
import { chargeHeaders } from "./lib/client.ts";
import { deliveryInvariants, scenario, type Checks, type Ctx } from "./lib/report.ts";
import { startSubscriber } from "./lib/subscriber.ts";

// The API's bounds, shrunk from the defaults (2 s lock, 5 s statement, 2 s pool wait, 10 s
// request) so that a round of refusals takes seconds. The lock bound is the one a lock storm
// trips; the others stay roomy, so a healthy charge slowed by a loaded machine is never
// refused (the request bound must hold statement plus pool wait).
const LOCK_TIMEOUT_MS = 500;
const STATEMENT_TIMEOUT_MS = 2000;
const API_BOUNDS = {
  API_LOCK_TIMEOUT_MS: String(LOCK_TIMEOUT_MS),
  API_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
  API_POOL_WAIT_MS: "1000",
  API_REQUEST_TIMEOUT_MS: "5000",
};
// A client gives up this long after sending: three times the request bound, so only a request
// the API never answers counts as "no answer", however loaded the machine is.
const CLIENT_TIMEOUT_MS = 15_000;
// A round holds its lock until this many requests were refused while it was held: more than
// the API's 32 connections and pool-gate slots, so a refusal that failed to give its slot or
// connection back would leave none for the requests sent after the release.
const REFUSALS_PER_ROUND = 40;
// ...and for at least this long: past the statement bound too, as a migration's lock would be.
const MIN_HOLD_MS = 2 * STATEMENT_TIMEOUT_MS;
// Requests sent after a release that must all succeed before the next phase starts.
const REQUESTS_AFTER_RELEASE = 24;
// New keys sent at once when the storms are over; under the pool size, so no pool wait trips.
const BURST = 24;
const WORKERS = 8;
// Pacing, so the reference subscriber (one inbox transaction per event) keeps up.
const PAUSE_MS = 40;
// Bounds a phase whose condition never comes (the API hangs instead of refusing): the checks
// below then report it, with the numbers.
const PHASE_TIMEOUT_MS = 20_000;
const TABLES = ["idempotency_keys", "charges"] as const;

// "pair": one of two requests sent at once with one key (one may get a 409 while the other runs).
type Kind = "single" | "pair" | "resend" | "retry" | "burst";

interface Sent {
  readonly key: string;
  readonly amountCents: number;
  readonly kind: Kind;
  readonly status: number; // 0 = no answer within CLIENT_TIMEOUT_MS
  readonly replayed: boolean;
  readonly body: string;
  readonly retryAfter: string | null;
  readonly sentAt: number;
  readonly answeredAt: number;
}

interface Round {
  readonly table: string;
  /** Before LOCK TABLE was sent, after it returned, before its ROLLBACK was sent, after the ROLLBACK returned. */
  readonly requestedAt: number;
  readonly grantedAt: number;
  readonly releaseAt: number;
  readonly releasedAt: number;
  readonly queued: boolean;
}

const sent: Sent[] = [];
const statusText = (a: Sent): string => (a.status === 0 ? "no answer" : `${a.status}${a.replayed ? " replay" : ""}`);

async function send(ctx: Ctx, api: Service, key: string, amountCents: number, kind: Kind): Promise<Sent> {
  const sentAt = performance.now();
  let s: Omit<Sent, "answeredAt">;
  try {
    const r = await fetch(`${api.base}/charges`, {
      method: "POST",
      headers: await chargeHeaders(key),
      body: JSON.stringify({ amountCents }),
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    const body = await r.text();
    const replayed = r.headers.get("idempotent-replayed") === "true";
    s = { key, amountCents, kind, status: r.status, replayed, body, retryAfter: r.headers.get("retry-after"), sentAt };
  } catch {
    s = { key, amountCents, kind, status: 0, replayed: false, body: "", retryAfter: null, sentAt };
  }
  const answer: Sent = { ...s, answeredAt: performance.now() };
  sent.push(answer);
  ctx.tally.answers.push({ key, amountCents, status: answer.status, replayed: answer.replayed, body: answer.body, at: Date.now() });
  return answer;
}

/** A client: a new key each time; every 4th key sent twice at once; every 3rd answered key resent. */
async function worker(ctx: Ctx, api: Service, w: number, running: () => boolean): Promise<void> {
  for (let i = 0; running(); i++) {
    const key = crypto.randomUUID();
    const amount = 100 + w * 10_000 + i;
    const twice = i % 4 === 3;
    const pair = await Promise.all(Array.from({ length: twice ? 2 : 1 }, () => send(ctx, api, key, amount, twice ? "pair" : "single")));
    if (i % 3 === 0 && pair.some((a) => a.status === 201)) await send(ctx, api, key, amount, "resend");
    await sleep(PAUSE_MS);
  }
}

const refusedWhileHeld = (from: number): number => sent.filter((a) => a.status === 503 && a.sentAt > from).length;
const answeredAfter = (at: number): number => sent.filter((a) => a.sentAt > at).length;

/** Holds ACCESS EXCLUSIVE on `table` until REFUSALS_PER_ROUND requests were refused meanwhile. */
async function storm(sql: Sql, table: string): Promise<Round> {
  const conn = await sql.reserve();
  const requestedAt = performance.now();
  let grantedAt = 0;
  let releaseAt = 0;
  let queued = false;
  try {
    await conn`begin`;
    await conn`lock table ${conn(table)} in access exclusive mode`;
    grantedAt = performance.now();
    queued = await waitForBackendOnLock(sql, API_APP, PHASE_TIMEOUT_MS).then(() => true, () => false);
    const enough = (): boolean => refusedWhileHeld(grantedAt) >= REFUSALS_PER_ROUND && performance.now() - grantedAt >= MIN_HOLD_MS;
    await waitUntil(enough, PHASE_TIMEOUT_MS, "refusals while the lock is held", 20).catch(() => {});
  } finally {
    releaseAt = performance.now();
    await conn`rollback`.catch(() => {});
    conn.release();
  }
  return { table, requestedAt, grantedAt, releaseAt, releasedAt: performance.now(), queued };
}

/** `nextAt`: when the next round sent its LOCK TABLE; what was answered later may have queued behind it. */
function checkRound(checks: Checks, r: Round, nextAt: number): void {
  checks.check(r.queued, `${r.table}: an API statement queued behind the ACCESS EXCLUSIVE lock`);
  const refused = sent.filter((a) => a.status === 503 && a.sentAt > r.grantedAt && a.answeredAt < r.releaseAt).length;
  checks.check(refused >= REFUSALS_PER_ROUND, `${r.table}: ${REFUSALS_PER_ROUND} requests refused with 503 while the lock was held`,
    `${refused} refused`);
  const during = sent.filter((a) => a.sentAt > r.grantedAt && a.answeredAt < r.releaseAt);
  const bad = during.filter((a) => !(a.status === 503 && a.retryAfter !== null && a.body.includes("service-unavailable")));
  checks.check(bad.length === 0, `${r.table}: every request answered while held was a 503 problem with Retry-After`,
    `${bad.length} of ${during.length}: ${[...new Set(bad.map(statusText))].join(", ")}`);
  const after = sent.filter((a) => a.sentAt > r.releasedAt && a.answeredAt < nextAt);
  const failed = after.filter((a) => !(a.status === 201 || (a.status === 409 && a.kind === "pair")));
  checks.check(after.length >= REQUESTS_AFTER_RELEASE && failed.length === 0,
    `${r.table}: full service at once: every request sent after the release was a 201 (or a 409 for one of a pair) (${after.length})`,
    `${failed.length} not 201: ${[...new Set(failed.map(statusText))].join(", ")}`);
}

/** Load, storm per table, service after each release; returns the rounds. */
async function runStorms(ctx: Ctx, api: Service): Promise<Round[]> {
  let running = true;
  const workers = Array.from({ length: WORKERS }, (_, w) => worker(ctx, api, w, () => running));
  const rounds: Round[] = [];
  try {
    await waitUntil(() => sent.filter((a) => a.status === 201).length >= WORKERS, PHASE_TIMEOUT_MS, "steady load");
    for (const table of TABLES) {
      const round = await storm(ctx.sql, table);
      rounds.push(round);
      await waitUntil(() => answeredAfter(round.releasedAt) >= REQUESTS_AFTER_RELEASE, PHASE_TIMEOUT_MS, "service after release")
        .catch(() => {});
    }
  } finally {
    running = false;
    await Promise.all(workers);
  }
  return rounds;
}

/** Keys no request got a 201 for (refused, or unanswered), with their amounts. */
function refusedKeys(): Map<string, number> {
  const got201 = new Set(sent.filter((a) => a.status === 201).map((a) => a.key));
  const refused = new Map<string, number>();
  for (const a of sent) if (!got201.has(a.key)) refused.set(a.key, a.amountCents);
  return refused;
}

/** Before anyone retries: a refused key left nothing, and every charge so far was answered 201. */
async function checkNothingBehindRefusals(ctx: Ctx, refused: readonly string[]): Promise<void> {
  const { checks, sql } = ctx;
  const [left] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where key = any(${refused as string[]}::text[])`;
  checks.check(left?.n === 0, `the ${refused.length} refused keys left no key row behind`, `${left?.n} rows`);
  const answered = [...ctx.tally.chargeIds()];
  const [behind] = await sql<{ n: number }[]>`select count(*)::int as n from charges where not (id = any(${answered}::uuid[]))`;
  checks.check(behind?.n === 0, "no charge committed behind a 503: every charge in the database was answered 201",
    `${behind?.n} never answered 201`);
}

/** What the refused clients do once the lock is gone: the same request, same key. */
async function retryRefused(ctx: Ctx, api: Service, refused: Map<string, number>): Promise<void> {
  const keys = [...refused.keys()];
  const retries: Sent[] = [];
  for (let i = 0; i < keys.length; i += WORKERS) {
    const chunk = keys.slice(i, i + WORKERS);
    retries.push(...(await Promise.all(chunk.map((k) => send(ctx, api, k, refused.get(k) ?? 0, "retry")))));
  }
  const bad = retries.filter((a) => !(a.status === 201 && !a.replayed));
  ctx.checks.check(keys.length > 0 && bad.length === 0, "every refused key, retried after the release, created its charge (fresh 201, not a replay)",
    `${bad.length} of ${keys.length}: ${bad.map(statusText).slice(0, 5).join(", ")}`);
}

async function checkService(ctx: Ctx, api: Service): Promise<void> {
  const { checks } = ctx;
  const ready = await fetch(`${api.base}/readyz`).then((r) => r.status, () => 0);
  checks.check(ready === 200, "the API reports ready after the storms", `readyz ${ready}`);
  const burst = await Promise.all(Array.from({ length: BURST }, (_, i) => send(ctx, api, crypto.randomUUID(), 7000 + i, "burst")));
  const notFresh = burst.filter((a) => !(a.status === 201 && !a.replayed)).length;
  checks.check(notFresh === 0, `${BURST} new keys sent at once after the storms: all fresh 201`, `${notFresh} were not`);
  checks.check(!api.child.exited, "the API process stayed up", `exit code ${api.child.exitCode}`);
}

function checkAnswers(checks: Checks, rounds: readonly Round[]): void {
  const unanswered = sent.filter((a) => a.status === 0).length;
  const slowest503 = Math.round(Math.max(0, ...sent.filter((a) => a.status === 503).map((a) => a.answeredAt - a.sentAt)));
  checks.check(unanswered === 0,
    `every request got an answer within the client's ${CLIENT_TIMEOUT_MS / 1000} s (slowest 503: ${slowest503} ms; request bound ${API_BOUNDS.API_REQUEST_TIMEOUT_MS} ms)`,
    `${unanswered} without an answer`);
  const s500 = sent.filter((a) => a.status >= 500 && a.status !== 503).length;
  checks.check(s500 === 0, "no 5xx other than 503", `${s500}`);
  const byKey = new Map(sent.filter((a) => a.status === 201 && !a.replayed).map((a) => [a.key, a.body]));
  // A resend that overlapped a lock may rightly be a 503; every other one must replay.
  const overlaps = (a: Sent): boolean => rounds.some((r) => a.answeredAt > r.requestedAt && a.sentAt < r.releasedAt);
  const resends = sent.filter((a) => a.kind === "resend" && !overlaps(a));
  const badReplays = resends.filter((a) => !(a.status === 201 && a.replayed && a.body === byKey.get(a.key))).length;
  checks.check(resends.length > 0 && badReplays === 0, `resends of a key answered 201, clear of the locks (${resends.length}), were byte-identical replays`,
    `${badReplays} were not`);
}

function checkCharges(ctx: Ctx, charges: number): void {
  const { checks, tally } = ctx;
  const fresh = tally.freshByKey();
  const twice = [...fresh.values()].filter((n) => n > 1).length;
  checks.check(twice === 0, "no key got two fresh 201s", `${twice} keys`);
  checks.check(charges === fresh.size, "charges = distinct keys that got a fresh 201", `${charges} charges, ${fresh.size} keys`);
}

await scenario("9", "lock storm: ACCESS EXCLUSIVE held past the API's bounds under load", async (ctx) => {
  // The processes the harness starts inherit this environment (only the API reads these).
  Object.assign(process.env, API_BOUNDS);
  const api = await startApi(ctx.db.url, ctx.prefix);
  ctx.sub = await startSubscriber(ctx.db.url, ctx.prefix, ctx.consumer);
  await startRelay(ctx.db.url, ctx.prefix);

  const rounds = await runStorms(ctx, api);
  rounds.forEach((round, i) => checkRound(ctx.checks, round, rounds[i + 1]?.requestedAt ?? Infinity));
  await checkService(ctx, api);
  const refused = refusedKeys();
  await checkNothingBehindRefusals(ctx, [...refused.keys()]);
  await retryRefused(ctx, api, refused);
  checkAnswers(ctx.checks, rounds);
  const totals = await deliveryInvariants(ctx, 30_000);
  checkCharges(ctx, totals.charges);
  return totals;
});

// (2) API: created charges/s and latency with 32 connections and unique keys, replays/s for
// one key, and the latency of a 409 while the winner is held. Load comes from wrk (C, one
// event loop per thread; a few % of a core at these rates), so the generator does not steal
// the server's CPU the way a second Bun process would.
import { freshDatabase, log, requireTool, run, startProcess, type FreshDb } from "./support.ts";
import { holdKey, waitForBackendOnLock } from "../testkit/database.ts";
import { API_APP, type Service } from "../testkit/processes.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { microsPer, sampleCpu, type CpuCost } from "./cpu.ts";

const SCRIPT = new URL("./wrk/charges.lua", import.meta.url).pathname;
// Every created/s and latency figure is a server's steady state: a new process first runs
// this long under the same load, while it compiles its hot path (and, on demand, a pool
// opens). pgbench's tps likewise leaves out its connection time. The warm-up's own p99 is
// reported as the start-up tail.
export const WARM_UP_SECONDS = 3;
// The API's winner reaches the held key row within milliseconds of its request.
const LOCK_WAIT_TIMEOUT_MS = 5000;

export interface WrkResult {
  readonly requests: number;
  readonly durationUs: number;
  readonly statusErrors: number;
  readonly socketErrors: number;
  readonly timeouts: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly maxUs: number;
  /** Answers by HTTP status, counted by the wrk script from every response. */
  readonly statuses: Readonly<Record<string, number>>;
}

/** How many answers had `status`. */
export function answered(r: WrkResult, status: number): number {
  return r.statuses[String(status)] ?? 0;
}

/** Answers other than `status`. */
function answeredOtherThan(r: WrkResult, status: number): number {
  return Object.values(r.statuses).reduce((n, count) => n + count, 0) - answered(r, status);
}

/** A run's p50, p99 and max latency in ms. */
export function latencyMs(r: WrkResult): { p50Ms: number; p99Ms: number; maxMs: number } {
  return { p50Ms: r.p50Us / 1000, p99Ms: r.p99Us / 1000, maxMs: r.maxUs / 1000 };
}

/** A run's charges created (201s) per second, and its latencies in ms. */
export function createdAndLatency(r: WrkResult): { createdPerSec: number; p50Ms: number; p99Ms: number; maxMs: number } {
  return { createdPerSec: answered(r, 201) / (r.durationUs / 1e6), ...latencyMs(r) };
}

/** Answers other than 201, socket errors and timeouts. */
export function errorsOf(r: WrkResult): number {
  return answeredOtherThan(r, 201) + r.socketErrors + r.timeouts;
}

/** `token`: sent as a Bearer token with every request (AUTH_MODE=jwt); none with AUTH_MODE=none. `body`: the JSON body, default the script's. */
export async function wrk(port: number, connections: number, seconds: number, key?: string, token?: string, body?: string): Promise<WrkResult> {
  const bin = requireTool("wrk", "wrk");
  const threads = Math.min(2, connections);
  const out = await run(
    [bin, "-t", String(threads), "-c", String(connections), "-d", `${seconds}s`, "--timeout", "5s", "-s", SCRIPT, `http://127.0.0.1:${port}`],
    { ...(key ? { BENCH_KEY: key } : {}), ...(token ? { BENCH_TOKEN: token } : {}), ...(body ? { BENCH_BODY: body } : {}) },
  );
  const line = out.split("\n").find((l) => l.startsWith("BENCHJSON "));
  if (!line) throw new Error(`cannot parse wrk output: ${out.slice(0, 400)}`);
  return JSON.parse(line.slice("BENCHJSON ".length)) as WrkResult;
}

/** jwt: the default, every request's HS256 token verified; none: no verification at all. */
export type AuthSetting = "jwt" | "none";

export interface ApiRun {
  readonly logLevel: string;
  readonly auth: AuthSetting;
  readonly createdPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly non2xx: number;
  readonly socketErrors: number;
  readonly chargesInDb: number;
  readonly replaysPerSec?: number;
  readonly replayNon2xx?: number;
  /** µs of CPU per charge in the API process and in the Postgres processes serving it (null: not measurable here). */
  readonly apiUsPerCharge: number | null;
  readonly postgresUsPerCharge: number | null;
  /** p99 and max of the warm-up, the process's first seconds under load. */
  readonly startP99Ms: number;
  readonly startMaxMs: number;
}

/** What the API is started with and the token its clients send, for one auth setting. */
async function authFor(auth: AuthSetting): Promise<{ env: Record<string, string>; token: string | undefined }> {
  return auth === "jwt" ? { env: authEnv(), token: await tokenFor() } : { env: { AUTH_MODE: "none" }, token: undefined };
}

/** `cwd`: a checkout of another commit to run its `api.ts` (relay-baseline.ts checkoutOf). */
export async function startApi(db: FreshDb, logLevel: string, env: Record<string, string> = {}, auth: AuthSetting = "jwt", cwd?: string): Promise<Service> {
  return startProcess("api", db, { LOG_LEVEL: logLevel, ...(await authFor(auth)).env, ...env }, "/readyz", cwd);
}

// The held winner waits on a lock for the whole wrk run: its bounds must outlast the hold
// (the defaults answer it 503 after 2 s), with this margin for start-up and the release.
const HOLD_MARGIN_MS = 30_000;
// API_REQUEST_TIMEOUT_MS must cover the statement bound plus the default pool wait (2 s).
const POOL_WAIT_ALLOWANCE_MS = 2_000;

function boundsOutlasting(holdMs: number): Record<string, string> {
  const bound = holdMs + HOLD_MARGIN_MS;
  return {
    API_LOCK_TIMEOUT_MS: String(bound),
    API_STATEMENT_TIMEOUT_MS: String(bound),
    API_REQUEST_TIMEOUT_MS: String(bound + POOL_WAIT_ALLOWANCE_MS),
  };
}

// wrk abandons the requests in flight when its time is up: the API still commits those
// charges, but their 201s are never counted, at most one per connection at the end of the
// warm-up (it may commit after the count in between) and one at the end of the run.
function checkCreated(created: number, chargesInDb: number, connections: number): void {
  if (chargesInDb < created || chargesInDb > created + 2 * connections) {
    throw new Error(`${created} charges answered 201 but ${chargesInDb} in the database (at most ${2 * connections} cut off by the ends of the warm-up and the run)`);
  }
}

export interface MeasuredRun {
  /** The warm-up: the process's first WARM_UP_SECONDS under load. */
  readonly start: WrkResult;
  readonly run: WrkResult;
  /** CPU of `pids` and of the Postgres processes serving `app`, over `run` only. */
  readonly cost: CpuCost;
  /** Charges committed by `run`, checked against its 201s. */
  readonly chargesInRun: number;
}

/** The warm-up, then the measured wrk run on the same server, with its CPU and its charges. */
export async function warmThenMeasure(db: FreshDb, port: number, connections: number, seconds: number, token: string | undefined, app: string, pids: readonly number[]): Promise<MeasuredRun> {
  const start = await wrk(port, connections, WARM_UP_SECONDS, undefined, token);
  const before = await countCharges(db);
  const cpu = await sampleCpu(db.sql, app, pids);
  const run = await wrk(port, connections, seconds, undefined, token);
  const cost = await cpu.stop();
  const chargesInRun = (await countCharges(db)) - before;
  checkCreated(answered(run, 201), chargesInRun, connections);
  return { start, run, cost, chargesInRun };
}

/** Created charges/s at `connections` with unique keys; then replays/s of one key when asked. */
export async function apiRun(connections: number, seconds: number, logLevel: string, replaySeconds: number, auth: AuthSetting = "jwt", env: Record<string, string> = {}): Promise<ApiRun> {
  const db = await freshDatabase("api");
  const api = await startApi(db, logLevel, env, auth);
  const { token } = await authFor(auth);
  try {
    const { start, run: r, cost, chargesInRun: inRun } = await warmThenMeasure(db, api.port, connections, seconds, token, API_APP, [api.child.pid]);
    let replay: { replaysPerSec: number; replayNon2xx: number } | undefined;
    if (replaySeconds > 0) {
      const key = crypto.randomUUID();
      const first = await post(api.port, key, token);
      if (first !== 201) throw new Error(`replay setup: first POST answered ${first}`);
      const rr = await wrk(api.port, connections, replaySeconds, key, token);
      replay = { replaysPerSec: answered(rr, 201) / (rr.durationUs / 1e6), replayNon2xx: answeredOtherThan(rr, 201) };
    }
    return {
      logLevel,
      auth,
      ...createdAndLatency(r),
      non2xx: answeredOtherThan(r, 201) + answeredOtherThan(start, 201),
      socketErrors: r.socketErrors + r.timeouts + start.socketErrors + start.timeouts,
      chargesInDb: inRun,
      apiUsPerCharge: microsPer(cost.processS, inRun),
      postgresUsPerCharge: microsPer(cost.postgresS, inRun),
      startP99Ms: start.p99Us / 1000,
      startMaxMs: start.maxUs / 1000,
      ...replay,
    };
  } finally {
    await api.child.stop();
    await db.drop();
  }
}

/** Charges in the database now. */
async function countCharges(db: FreshDb): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  return row?.n ?? 0;
}

async function post(port: number, key: string, token: string | undefined): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/charges`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: '{"amountCents":4900}',
  });
  await res.arrayBuffer();
  return res.status;
}

export interface ConflictRun {
  readonly requests: number;
  readonly non409: number;
  readonly statuses: Readonly<Record<string, number>>;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly winnerStatus: number;
}

/**
 * 409 latency while the winner is held: our own open transaction inserts an uncommitted key
 * row; the API's winner takes the advisory lock and queues behind it on the unique index
 * (seen as wait_event_type = 'Lock'); every other request for the key must 409 at once.
 */
export async function conflictRun(connections: number, seconds: number): Promise<ConflictRun> {
  const db = await freshDatabase("conflict");
  const api = await startApi(db, "info", boundsOutlasting(seconds * 1000));
  const key = crypto.randomUUID();
  // The held row is the test kit's tenant's, whose token every request carries.
  const hold = await holdKey(db.sql, key);
  const token = await tokenFor();
  try {
    const winner = post(api.port, key, token);
    await waitForBackendOnLock(db.sql, API_APP, LOCK_WAIT_TIMEOUT_MS);
    const r = await wrk(api.port, connections, seconds, key, token);
    await hold.release();
    const winnerStatus = await winner;
    // Only the held winner may have created a charge: every other answer was a 409 or an error.
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
    const created = answered(r, 201) + (winnerStatus === 201 ? 1 : 0);
    if ((row?.n ?? 0) !== created) throw new Error(`409 run: ${created} charges answered 201 but ${row?.n} in the database`);
    return {
      requests: r.requests,
      non409: answeredOtherThan(r, 409) + r.socketErrors + r.timeouts,
      statuses: r.statuses,
      ...latencyMs(r),
      winnerStatus,
    };
  } finally {
    await hold.release();
    await api.child.stop();
    await db.drop();
  }
}

export function describeApi(r: ApiRun): string {
  return `api(${r.logLevel}, auth ${r.auth}): ${Math.round(r.createdPerSec)} created/s p50 ${r.p50Ms.toFixed(1)} p99 ${r.p99Ms.toFixed(1)} max ${r.maxMs.toFixed(1)} ms ` +
    `(first ${WARM_UP_SECONDS} s: p99 ${r.startP99Ms.toFixed(1)} max ${r.startMaxMs.toFixed(1)} ms)` +
    (r.replaysPerSec ? `, ${Math.round(r.replaysPerSec)} replays/s` : "");
}

export { log };

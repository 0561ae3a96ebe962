// (2) API: created charges/s and latency with 32 connections and unique keys, replays/s for
// one key, and the latency of a 409 while the winner is held. Load comes from wrk (C, one
// event loop per thread; a few % of a core at these rates), so the generator does not steal
// the server's CPU the way a second Bun process would.
import { freshDatabase, log, requireTool, run, startChild, type Child, type FreshDb } from "./support.ts";
import { backendWaitingOnLock, holdKey } from "../testkit/database.ts";

const SCRIPT = new URL("./wrk/charges.lua", import.meta.url).pathname;

export interface WrkResult {
  readonly requests: number;
  readonly durationUs: number;
  readonly statusErrors: number;
  readonly socketErrors: number;
  readonly timeouts: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly maxUs: number;
}

export async function wrk(port: number, connections: number, seconds: number, key?: string): Promise<WrkResult> {
  const bin = requireTool("wrk", "wrk");
  const threads = Math.min(2, connections);
  const out = await run(
    [bin, "-t", String(threads), "-c", String(connections), "-d", `${seconds}s`, "--timeout", "5s", "-s", SCRIPT, `http://127.0.0.1:${port}`],
    key ? { BENCH_KEY: key } : {},
  );
  const line = out.split("\n").find((l) => l.startsWith("BENCHJSON "));
  if (!line) throw new Error(`cannot parse wrk output: ${out.slice(0, 400)}`);
  return JSON.parse(line.slice("BENCHJSON ".length)) as WrkResult;
}

export interface ApiRun {
  readonly logLevel: string;
  readonly createdPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly non2xx: number;
  readonly socketErrors: number;
  readonly chargesInDb: number;
  readonly replaysPerSec?: number;
  readonly replayNon2xx?: number;
}

export async function startApi(db: FreshDb, logLevel: string): Promise<Child> {
  return startChild("api.ts", { DATABASE_URL: db.url, LOG_LEVEL: logLevel }, "/readyz", "PORT");
}

/** Created charges/s at `connections` with unique keys; then replays/s of one key when asked. */
export async function apiRun(connections: number, seconds: number, logLevel: string, replaySeconds: number): Promise<ApiRun> {
  const db = await freshDatabase("api");
  const api = await startApi(db, logLevel);
  try {
    const r = await wrk(api.port, connections, seconds);
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from charges`;
    const created = r.requests - r.statusErrors;
    let replay: { replaysPerSec: number; replayNon2xx: number } | undefined;
    if (replaySeconds > 0) {
      const key = crypto.randomUUID();
      const first = await post(api.port, key);
      if (first !== 201) throw new Error(`replay setup: first POST answered ${first}`);
      const rr = await wrk(api.port, connections, replaySeconds, key);
      replay = { replaysPerSec: (rr.requests - rr.statusErrors) / (rr.durationUs / 1e6), replayNon2xx: rr.statusErrors };
    }
    return {
      logLevel,
      createdPerSec: created / (r.durationUs / 1e6),
      p50Ms: r.p50Us / 1000,
      p99Ms: r.p99Us / 1000,
      maxMs: r.maxUs / 1000,
      non2xx: r.statusErrors,
      socketErrors: r.socketErrors + r.timeouts,
      chargesInDb: row?.n ?? 0,
      ...replay,
    };
  } finally {
    await api.stop();
    await db.drop();
  }
}

async function post(port: number, key: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/charges`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    body: '{"amountCents":4900}',
  });
  await res.arrayBuffer();
  return res.status;
}

export interface ConflictRun {
  readonly requests: number;
  readonly non409: number;
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
  const api = await startApi(db, "info");
  const key = crypto.randomUUID();
  const hold = await holdKey(db.sql, key);
  try {
    const winner = post(api.port, key);
    await waitForLockWait(db);
    const r = await wrk(api.port, connections, seconds, key);
    await hold.release();
    const winnerStatus = await winner;
    return {
      requests: r.requests,
      non409: r.requests - r.statusErrors,
      p50Ms: r.p50Us / 1000,
      p99Ms: r.p99Us / 1000,
      maxMs: r.maxUs / 1000,
      winnerStatus,
    };
  } finally {
    await hold.release();
    await api.stop();
    await db.drop();
  }
}

async function waitForLockWait(db: FreshDb): Promise<void> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    if ((await backendWaitingOnLock(db.sql, "charges-api")) !== undefined) return;
    if (Date.now() > deadline) throw new Error("the API's winner never queued behind the held key row");
    await Bun.sleep(10);
  }
}

export function describeApi(r: ApiRun): string {
  return `api(${r.logLevel}): ${Math.round(r.createdPerSec)} created/s p50 ${r.p50Ms.toFixed(1)} p99 ${r.p99Ms.toFixed(1)} max ${r.maxMs.toFixed(1)} ms` +
    (r.replaysPerSec ? `, ${Math.round(r.replaysPerSec)} replays/s` : "");
}

export { log };

// The API's bare-stack limit (bench/bare-api.ts under the same wrk script and concurrency as
// `bun api.ts`), and the API scaled out: N `bun api.ts` processes sharing one port
// (API_REUSE_PORT), each with its own pool. Both with their CPU per charge from /proc.
import { BARE_APP } from "./bare-api.ts";
import { microsPer } from "./cpu.ts";
import { createdAndLatency, errorsOf, warmThenMeasure, WARM_UP_SECONDS, type MeasuredRun } from "./api-bench.ts";
import { benchServices, freshDatabase } from "./support.ts";
import { API_APP, spawnScript, startEntrypoint, waitForHttp, type Child } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";
import { freePort } from "../dev/ports.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";

// Bun and api.ts start in well under a second; a loaded 2-core machine needs margin.
const READY_TIMEOUT_MS = 20_000;
// API_POOL_SIZE's default: the database connections of one API process.
const TOTAL_CONNECTIONS = 32;

export interface Throughput {
  readonly label: string;
  readonly createdPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Answers other than 201, socket errors and timeouts. */
  readonly errors: number;
  readonly chargesInDb: number;
  /** µs of CPU per charge created, in the server process(es) and in Postgres. */
  readonly serverUsPerCharge: number | null;
  readonly postgresUsPerCharge: number | null;
  /** p99 and max of the warm-up (api-bench.ts WARM_UP_SECONDS), the first seconds under load. */
  readonly startP99Ms: number;
  readonly startMaxMs: number;
}

function throughput(label: string, { start, run: r, cost, chargesInRun: chargesInDb }: MeasuredRun): Throughput {
  return {
    label,
    ...createdAndLatency(r),
    startP99Ms: start.p99Us / 1000,
    startMaxMs: start.maxUs / 1000,
    errors: errorsOf(start) + errorsOf(r),
    chargesInDb,
    serverUsPerCharge: microsPer(cost.processS, chargesInDb),
    postgresUsPerCharge: microsPer(cost.postgresS, chargesInDb),
  };
}

/** The bare stack: created charges/s at `connections`, and its CPU per charge. */
export async function bareRun(connections: number, seconds: number): Promise<Throughput> {
  const db = await freshDatabase("bare");
  const port = await freePort();
  const child = spawnScript("bench/bare-api.ts", { name: "bare-api", env: { DATABASE_URL: db.url, PORT: String(port) } });
  try {
    await waitForHttp(child, `http://127.0.0.1:${port}/`);
    return throughput("bare", await warmThenMeasure(db, port, connections, seconds, undefined, BARE_APP, [child.pid]));
  } finally {
    await child.stop();
    await db.drop();
  }
}

/**
 * `processes` × `bun api.ts` on one port (API_REUSE_PORT=1: the kernel spreads connections
 * over the listeners), each with its own pool; created charges/s at `connections`.
 */
export async function scaledRun(processes: number, connections: number, seconds: number): Promise<Throughput> {
  const db = await freshDatabase("scale");
  const port = await freePort();
  const token = await tokenFor();
  const { mqttUrl } = await benchServices();
  // The pools share out the one process's 32 connections: as many backends whatever N, so
  // the comparison is of processes, not of connections (and N x 32 could pass max_connections).
  const pool = String(Math.max(1, Math.floor(TOTAL_CONNECTIONS / processes)));
  const env = { LOG_LEVEL: "info", API_POOL_SIZE: pool, ...authEnv(), ...(processes > 1 ? { API_REUSE_PORT: "1" } : {}) };
  const children: Child[] = [];
  try {
    for (let i = 0; i < processes; i++) {
      let listening = false;
      const onLine = (line: string) => void (line.includes('"msg":"api listening"') && (listening = true));
      // Not by its ready path: once one listens, the port answers whether this one does or not.
      const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, ...env }, port, stdout: onLine, readyPath: false });
      children.push(api.child);
      await waitUntil(() => {
        if (api.child.exited) throw new Error(`api ${i + 1} exited: ${api.child.output()}`);
        return listening;
      }, READY_TIMEOUT_MS, `api ${i + 1} to listen`);
    }
    const measured = await warmThenMeasure(db, port, connections, seconds, token, API_APP, children.map((c) => c.pid));
    return throughput(processes === 1 ? "ours" : `ours x${processes}`, measured);
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    await db.drop();
  }
}

export function describeThroughput(t: Throughput): string {
  const us = (v: number | null) => (v === null ? "-" : Math.round(v).toString());
  return `${t.label}: ${Math.round(t.createdPerSec)} created/s p50 ${t.p50Ms.toFixed(1)} p99 ${t.p99Ms.toFixed(1)} ms, ` +
    `CPU/charge ${us(t.serverUsPerCharge)} µs server + ${us(t.postgresUsPerCharge)} µs postgres ` +
    `(first ${WARM_UP_SECONDS} s: p99 ${t.startP99Ms.toFixed(1)} ms)` +
    (t.errors > 0 ? `, ${t.errors} errors` : "");
}

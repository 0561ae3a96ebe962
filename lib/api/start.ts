// Assembles the API process from config: the pool, the schema, the service, the relay's
// wake-up, metrics, request logs, and the app.
import type { Meter } from "@opentelemetry/api";
import type { Config } from "../shared/config.ts";
import { createSql, describeDbError, migrate, type Sql } from "../shared/db.ts";
import { CHARGES_ENDPOINT, createChargeService, type ChargeOutcome } from "./charges.ts";
import { buildApp } from "./app.ts";
import { createApiMetrics } from "./metrics.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { createOutboxNotifier } from "../shared/wakeup.ts";
import { createPoolGate } from "../shared/pool-gate.ts";
import { keyHash } from "./keys.ts";
import { problemResponse } from "./problem.ts";

// One connection per concurrent request at the load we benchmark (32 clients): every
// charge is one statement ending in a commit flush, and more concurrent commits let group
// commit share the flushes (the measured effect of pool size is in bench/README.md).
const API_POOL_SIZE = 32;

export interface ApiProcess {
  readonly sql: Sql;
  readonly fetch: (request: Request) => Promise<Response>;
  close(): Promise<void>;
}

export interface ApiOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  /** Where the API's instruments live; defaults to the global meter provider. */
  readonly meter?: Meter;
  readonly logger?: Logger;
  /** Pool size; tests shrink it to saturate the pool with a few requests. */
  readonly poolSize?: number;
}

/** Connects and migrates; an unreachable database is a StartupError with one clear line. */
export async function startApi(config: Config, options: ApiOptions = {}): Promise<ApiProcess> {
  const bounds = config.apiTimeBounds;
  const poolSize = options.poolSize ?? API_POOL_SIZE;
  const sql = createSql(config.databaseUrl, {
    max: poolSize,
    applicationName: "charges-api",
    statementTimeoutMs: bounds.statementTimeoutMs,
    lockTimeoutMs: bounds.lockTimeoutMs,
  });
  try {
    await migrate(sql);
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new StartupError(`cannot reach or migrate the database at DATABASE_URL: ${describeDbError(error)}`);
  }
  const log = options.logger ?? createLogger(config.logLevel, "api");
  const notifier = createOutboxNotifier(sql, undefined, (error) =>
    log.warn("outbox notify failed; the relay's poll will find the row", { error: describeDbError(error) }),
  );
  const counters = createApiMetrics(options.meter);
  const outcomes = new WeakMap<Request, { outcome: ChargeOutcome["kind"]; keyHash: string }>();
  const gate = createPoolGate({
    size: poolSize,
    waitMs: bounds.poolWaitMs,
    requestTimeoutMs: bounds.requestTimeoutMs,
    statementTimeoutMs: bounds.statementTimeoutMs,
  });
  const charges = createChargeService(sql, { ttlSeconds: config.idempotencyTtlSeconds, onCreated: notifier.poke, bounds: gate });
  const app = buildApp({
    sql,
    charges,
    metrics: options.metrics,
    // Runs after the charge committed: a failure here is logged, never turned into a 500.
    onOutcome(request, outcome, key) {
      try {
        counters.countOutcome(CHARGES_ENDPOINT, outcome);
        outcomes.set(request, { outcome, keyHash: keyHash(key) });
      } catch (error) {
        log.error("outcome bookkeeping failed", { error: String(error) });
      }
    },
  });
  // Whatever happens after the route answered (its log line) cannot change the answer: a
  // committed charge always goes out as its 201.
  const fetch = async (request: Request): Promise<Response> => {
    const started = performance.now();
    let response: Response;
    try {
      response = await app.handle(request);
    } catch (error) {
      log.error("unhandled error", { error: String(error) });
      response = problemResponse("internal", "an unexpected error occurred");
    }
    try {
      logRequest(log, request, response, performance.now() - started, outcomes.get(request));
    } catch (error) {
      log.error("request log failed", { error: String(error) });
    }
    return response;
  };
  return {
    sql,
    fetch,
    async close() {
      await notifier.close();
      await sql.end({ timeout: 5 });
    },
  };
}

function logRequest(
  log: Logger,
  request: Request,
  response: Response,
  durationMs: number,
  extra: { outcome: string; keyHash: string } | undefined,
): void {
  // A base, so a url without an origin still yields its path.
  const path = new URL(request.url, "http://localhost").pathname;
  const fields = {
    method: request.method,
    route: routeOf(path),
    status: response.status,
    durationMs: Math.round(durationMs * 100) / 100,
    ...extra,
  };
  if (response.status >= 500) log.error("request", fields);
  else log.info("request", fields);
}

// The route template, so a log line never mixes ids into the route field.
function routeOf(path: string): string {
  if (/^\/charges\/[^/]+$/.test(path)) return "/charges/:id";
  return ["/charges", "/healthz", "/readyz", "/metrics", "/openapi.json"].includes(path) ? path : "(unmatched)";
}

export class StartupError extends Error {
  override name = "StartupError";
}

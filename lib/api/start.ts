// The API process from config: pool, schema, idempotency core, relay wake-up, metrics; the pipeline
// (http/pipeline.ts) is shared with the edge worker, /docs' assets and the console are its own.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { Meter } from "@opentelemetry/api";
import type { Config } from "../platform/config.ts";
import { sqlState, type Sql } from "../platform/db.ts";
import { within } from "../platform/within.ts";
import { applySchema } from "../platform/startup.ts";
import { API_POOL_NAME, apiSql, boundedCore, logNotifyFailure } from "./services.ts";
import { createApi } from "./http/pipeline.ts";
import type { RequestDeps } from "./http/context.ts";
import type { AppOptions } from "./app.ts";
import type { DocsAssets } from "./documentation.ts";
import { ASSET_CACHE_CONTROL, assetAnswer, type Asset } from "./asset-answer.ts";
import { OPERATIONS, SCHEMAS } from "./routes.ts";
import { endpointOf } from "../idempotency/model.ts";
import { cachedExposition, createApiMetrics } from "./metrics.ts";
import { createLogger, type Logger } from "../platform/log.ts";
import { createOutboxNotifier, listenForOutbox, type OutboxListener } from "../platform/wakeup.ts";
import { isTransactionPooled } from "../platform/pooler.ts";
import { createAuthenticator, IMPLICIT_TENANT, type AuthOptions } from "./auth.ts";
import { useKeyHashSecret } from "../platform/redact.ts";
import { createAdmission } from "./admission.ts";
import { createReadiness } from "./readiness.ts";
import { createApiConsole, withConsole } from "./console/index.ts";

export interface ApiProcess {
  readonly sql: Sql;
  readonly fetch: (request: Request) => Promise<Response>;
  readonly routes: ReturnType<typeof createApi>["routes"];
  /** With OPERATOR_PORT: what that port serves (`fetch` then serves the /charges routes only). */
  readonly operatorFetch: ((request: Request) => Promise<Response>) | undefined;
  close(): Promise<void>;
}

export interface ApiOptions extends Pick<AppOptions, "metrics" | "httpMetrics"> {
  readonly meter?: Meter;
  readonly logger?: Logger;
  /** Default API_POOL_SIZE; tests shrink it to saturate the pool with a few requests. */
  readonly poolSize?: number;
  readonly auth?: AuthOptions;
  /** Open every pool connection before returning (default true); the test kit's APIs do not. */
  readonly openPool?: boolean;
}

/** Connects and migrates: an unreachable database is a StartupError, no key source a ConfigError first. */
export async function startApi(config: Config, options: ApiOptions = {}): Promise<ApiProcess> {
  const auth = createAuthenticator(config.auth, options.auth);
  const poolSize = options.poolSize ?? config.apiPoolSize;
  const sql = apiSql(config, poolSize, API_POOL_NAME);
  await applySchema(sql);
  const log = options.logger ?? createLogger(config.logLevel, "api");
  useKeyHashSecret(config.keyHashSecret, log);
  if (options.openPool ?? true) await openPool(sql, poolSize, log);
  if (auth.mode === "none") {
    log.warn("AUTH_MODE=none: /charges is served without authentication, every request as one tenant", { tenant: IMPLICIT_TENANT });
  }
  // Notifies name their sender: this process wakes its own waiters directly (idempotency/run.ts),
  // else a tenant's many Prefer: wait requests would re-read their keys on every other's commit.
  const sender = crypto.randomUUID();
  const notifier = createOutboxNotifier(sql, undefined, logNotifyFailure(log), undefined, sender);
  const counters = createApiMetrics(options.meter, OPERATIONS.map(endpointOf));
  // Behind a transaction pooler LISTEN hears nothing: Prefer: wait is ignored there.
  let listener: OutboxListener | undefined;
  const listen = isTransactionPooled(sql)
    ? undefined
    : async (onNotify: () => void) => (listener = await listenForOutbox(sql, (from) => void (from !== sender && onNotify())));
  const core = boundedCore(config, sql, poolSize, notifier.poke, counters, listen);
  const admission = createAdmission(config.admission);
  counters.observeInFlight(() => admission.inFlight);
  const deps: RequestDeps = { sql, core, auth, log, counters, admission, readiness: createReadiness() };
  const exposition = options.metrics && cachedExposition(options.metrics, config.admission.metricsMaxAgeMs);
  const metrics = exposition && (() => admission.paceOperator().then(exposition));
  const handlerOptions = { metrics, httpMetrics: options.httpMetrics, docs: swaggerUiAssets() };
  const split = config.admission.operatorPort !== undefined;
  const api = createApi(SCHEMAS, deps, { ...handlerOptions, surface: split ? "api" : "all" });
  const operator = split ? createApi(SCHEMAS, deps, { ...handlerOptions, surface: "operator" }) : undefined;
  const operatorConsole = createApiConsole(config, sql, log);
  return {
    sql,
    fetch: operator ? api.handle : withConsole(api.handle, operatorConsole),
    routes: [...api.routes, ...(operator?.routes ?? [])],
    operatorFetch: operator && withConsole(operator.handle, operatorConsole),
    async close() {
      await notifier.close();
      await listener?.unlisten().catch(() => {});
      await sql.end({ timeout: 5 });
    },
  };
}

// A server that stops answering mid-way delays the start at most this long; the rest opens on demand.
const POOL_OPEN_TIMEOUT_MS = 6_000;

// Opened before listening, or the first requests under load wait on backends forked. Not reserve():
// postgres.js can drop a refused reservation's connection (porsager/postgres#1195).
async function openPool(sql: Sql, size: number, log: Logger): Promise<void> {
  let opened = 0;
  let failure: string | undefined;
  const opening = Array.from({ length: size }, () =>
    sql`select 1`.then(
      () => void opened++,
      (error: unknown) => void (failure ??= sqlState(error) ?? "unknown"),
    ),
  );
  const done = await within(Promise.all(opening), POOL_OPEN_TIMEOUT_MS);
  if (done === undefined) failure ??= "timeout";
  const message = "the pool did not open in full at start; the rest opens on demand";
  if (failure !== undefined) log.warn(message, { opened, wanted: size, failure });
}

const SCRIPT = "/docs/swagger-ui-bundle.js";
const STYLESHEET = "/docs/swagger-ui.css";

function swaggerUiAssets(): DocsAssets {
  const file = (name: string, contentType: string) => assetAnswer(async (): Promise<Asset> => ({
    body: new Uint8Array(await readFile(createRequire(import.meta.url).resolve(`swagger-ui-dist/${name}`))),
    contentType,
  }), ASSET_CACHE_CONTROL);
  const files = {
    [SCRIPT]: file("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    [STYLESHEET]: file("swagger-ui.css", "text/css; charset=utf-8"),
  };
  return { script: SCRIPT, stylesheet: STYLESHEET, files };
}

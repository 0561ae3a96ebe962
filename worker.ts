// The API as a fetch module for edge runtimes: workerd (Cloudflare Workers; `bun run worker:dev`
// runs it locally) and `deno serve` (Deno Deploy). The same routes, authentication and
// idempotency core as `bun api.ts` (lib/api/http/pipeline.ts), with what an isolate allows:
// - the handler is built here, at module scope: workerd allows code generation (TypeBox's
//   compiled checks) only while the module loads;
// - one database client per request, ended through waitUntil: workerd forbids a socket opened
//   for one request to serve another (Hyperdrive pools connections in front of the database);
// - no migrations: run `bun run migrate` once per deploy;
// - the relay is woken by a notify sent after the response (waitUntil), its poll as fallback;
// - metrics are pushed over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; /metrics is off;
// - keyHash's key is the API_KEY_HASH_SECRET binding, or one the isolate makes (and says so).
import { AsyncLocalStorage } from "node:async_hooks";
import { ConfigError, loadConfig, type Config, type Env } from "./lib/platform/config.ts";
import { createLogger } from "./lib/platform/log.ts";
import { notifyOutbox } from "./lib/platform/wakeup.ts";
import { startPushTelemetry, type PushTelemetry } from "./lib/platform/telemetry-push.ts";
import { apiSql, boundedCore, logNotifyFailure } from "./lib/api/services.ts";
import { createApiHandler } from "./lib/api/http/pipeline.ts";
import type { RequestDeps } from "./lib/api/http/context.ts";
import { OPERATIONS, SCHEMAS } from "./lib/api/routes.ts";
import { endpointOf } from "./lib/idempotency/model.ts";
import { createApiMetrics } from "./lib/api/metrics.ts";
import { createAuthenticator } from "./lib/api/auth.ts";
import { createAdmission } from "./lib/api/admission.ts";
import { createReadiness } from "./lib/api/readiness.ts";
import { problemResponse } from "./lib/api/problem.ts";
import { useKeyHashSecret } from "./lib/platform/redact.ts";

// A request runs one statement at a time (an operation is one statement; a resend follows the
// failed try), so one connection is all it can use.
const CONNECTIONS_PER_REQUEST = 1;
// After the response: the notify and a clean Terminate get this long before the socket is cut.
const END_TIMEOUT_S = 5;

/** What the runtime hands a fetch module: workerd's ExecutionContext; `deno serve` passes none. */
interface WaitUntil {
  waitUntil(promise: Promise<unknown>): void;
}

/** Built once per isolate from its bindings: everything that outlives a request. */
type Isolate =
  | { readonly ok: true; readonly config: Config; readonly shared: Omit<RequestDeps, "sql" | "core">; readonly telemetry?: PushTelemetry }
  | { readonly ok: false; readonly message: string };

const scope = new AsyncLocalStorage<RequestDeps>();

/** The dependencies of the request being served: built before any request, each read resolves to that request's own. */
class ScopedDeps implements RequestDeps {
  private get current(): RequestDeps {
    const deps = scope.getStore();
    if (!deps) throw new Error("bug: a request ran outside its scope");
    return deps;
  }
  get sql() {
    return this.current.sql;
  }
  get core() {
    return this.current.core;
  }
  get auth() {
    return this.current.auth;
  }
  get log() {
    return this.current.log;
  }
  get counters() {
    return this.current.counters;
  }
  get admission() {
    return this.current.admission;
  }
  get readiness() {
    return this.current.readiness;
  }
}

const handle = createApiHandler(SCHEMAS, new ScopedDeps(), { aheadOfTime: true });
const isolates = new WeakMap<object, Isolate>();
let denoIsolate: Isolate | undefined;

export default {
  async fetch(request: Request, env?: unknown, ctx?: Partial<WaitUntil>): Promise<Response> {
    const isolate = isolateFor(env);
    if (!isolate.ok) {
      console.error(JSON.stringify({ level: "error", component: "worker", msg: "configuration error", error: isolate.message }));
      return problemResponse("internal", "the service is misconfigured");
    }
    const { config, shared, telemetry } = isolate;
    const sql = apiSql(config, CONNECTIONS_PER_REQUEST, "charges-worker", true);
    const after: Promise<unknown>[] = [];
    const wake = (): void => void after.push(notifyOutbox(sql).catch(logNotifyFailure(shared.log)));
    const core = boundedCore(config, sql, CONNECTIONS_PER_REQUEST, wake);
    try {
      return await scope.run({ ...shared, sql, core }, () => handle(request));
    } finally {
      const push = telemetry?.pushDue()?.catch((error: unknown) => shared.log.warn("metrics push failed", { error: String(error) }));
      const done = Promise.all(after).then(() => sql.end({ timeout: END_TIMEOUT_S }));
      // Without a waitUntil (deno serve) the process outlives the response anyway.
      if (typeof ctx?.waitUntil === "function") ctx.waitUntil(Promise.all([done, push]));
    }
  },
};

/** workerd passes its bindings to every request; `deno serve` passes none, and Deno.env is read once. */
function isolateFor(env: unknown): Isolate {
  if (typeof env === "object" && env !== null && !isServeInfo(env)) {
    let isolate = isolates.get(env);
    if (!isolate) isolates.set(env, (isolate = buildIsolate(bindingsOf(env as Record<string, unknown>))));
    return isolate;
  }
  denoIsolate ??= buildIsolate(denoEnv());
  return denoIsolate;
}

function buildIsolate(env: Env): Isolate {
  try {
    const config = loadConfig(env);
    const log = createLogger(config.logLevel, "api");
    useKeyHashSecret(config.keyHashSecret, log);
    const telemetry = config.otlpEndpoint ? startPushTelemetry("charges-worker", config.otlpEndpoint) : undefined;
    const shared = {
      auth: createAuthenticator(config.auth),
      log,
      counters: createApiMetrics(telemetry?.meter, OPERATIONS.map(endpointOf)),
      // Per isolate: workerd spreads a deployment's requests over many.
      admission: createAdmission(config.admission),
      readiness: createReadiness(),
    };
    return { ok: true, config, shared, telemetry };
  } catch (error) {
    if (error instanceof ConfigError) return { ok: false, message: error.message };
    throw error;
  }
}

/**
 * The string bindings, as the server reads its environment; a Hyperdrive binding named
 * HYPERDRIVE stands in for DATABASE_URL (its connection string reaches the pooler).
 */
function bindingsOf(env: Record<string, unknown>): Env {
  const out: Env = {};
  for (const [name, value] of Object.entries(env)) if (typeof value === "string") out[name] = value;
  const hyperdrive = env.HYPERDRIVE as { connectionString?: unknown } | undefined;
  if (typeof hyperdrive?.connectionString === "string") out.DATABASE_URL = hyperdrive.connectionString;
  return out;
}

// deno serve's second argument describes the connection, not bindings.
function isServeInfo(value: object): boolean {
  return "remoteAddr" in value;
}

function denoEnv(): Env {
  const deno = (globalThis as { Deno?: { env: { toObject(): Env } } }).Deno;
  return deno ? deno.env.toObject() : {};
}

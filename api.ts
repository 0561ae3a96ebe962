// `bun api.ts`: the charges HTTP API on PORT.
import { configOrExit } from "./lib/platform/config.ts";
import { startApi } from "./lib/api/start.ts";
import { onShutdownSignal, serve } from "./lib/platform/runtime.ts";
import { createLogger } from "./lib/platform/log.ts";
import { maskUrl } from "./lib/platform/redact.ts";
import { startTelemetry } from "./lib/platform/telemetry.ts";
import { createHttpServerMetrics } from "./lib/platform/http-metrics.ts";
import { startRuntimeMetrics } from "./lib/platform/runtime-metrics.ts";
import { exitOnStartupError, stopOnUnhandledRejection } from "./lib/platform/startup.ts";
import { databaseModeLine } from "./lib/platform/pooler.ts";

const config = configOrExit(process.env);
const log = createLogger(config.logLevel, "api");
stopOnUnhandledRejection(log);
const telemetry = startTelemetry("charges-api", config.otlpEndpoint);
const runtime = startRuntimeMetrics(telemetry.provider.getMeter("charges"));
const httpMetrics = config.apiHttpMetrics ? createHttpServerMetrics() : undefined;
if (httpMetrics) telemetry.addHistogram(httpMetrics);
const api = await startApi(config, { metrics: telemetry.scrape, logger: log, httpMetrics }).catch(exitOnStartupError("api"));
const server = serve(config.port, api.fetch, undefined, { reusePort: config.apiReusePort });
log.info("api listening", { port: server.port, reusePort: config.apiReusePort, poolSize: config.apiPoolSize, databaseUrl: maskUrl(config.databaseUrl) });
// With OPERATOR_PORT, health, readiness, metrics and the docs there, and PORT serves the API only.
const operatorPort = config.admission.operatorPort;
const operator = operatorPort !== undefined && api.operatorFetch ? serve(operatorPort, api.operatorFetch, config.admission.operatorHost) : undefined;
if (operator) log.info("operator endpoints listening", { port: operator.port, host: config.admission.operatorHost });
const database = databaseModeLine(config);
log.info(database.msg, database.fields);

// On SIGTERM, requests in flight get this long to finish before their connections are cut:
// far above a request's own time bounds, and well inside the 30 s an orchestrator usually
// waits before SIGKILL.
const SHUTDOWN_GRACE_MS = 10_000;
let stopping = false;

onShutdownSignal(async (signal) => {
  if (stopping) return;
  stopping = true;
  log.info("api stopping", { signal, graceMs: SHUTDOWN_GRACE_MS });
  await Promise.all([server.stop(SHUTDOWN_GRACE_MS), operator?.stop(SHUTDOWN_GRACE_MS)]);
  await api.close();
  runtime.stop();
  await telemetry.shutdown();
  log.info("api stopped");
  process.exit(0);
});

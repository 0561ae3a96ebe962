// `bun api.ts`: the charges HTTP API on PORT.
import { ConfigError, configOrExit } from "./lib/shared/config.ts";
import { startApi, StartupError } from "./lib/api/start.ts";
import { onShutdownSignal, serve } from "./lib/shared/runtime.ts";
import { createLogger } from "./lib/shared/log.ts";
import { startTelemetry } from "./lib/shared/telemetry.ts";
import { describeDbError, isUnavailable } from "./lib/shared/db.ts";

const config = configOrExit(process.env);
const log = createLogger(config.logLevel, "api");
// postgres.js can leave a rejection unhandled when a connection dies (a stale 57P01 handed
// to its own type fetch on reconnect). That is the database going away, which the pool
// survives; anything else unhandled is a bug, and the process stops rather than limp on.
process.on("unhandledRejection", (reason) => {
  if (isUnavailable(reason)) return log.warn("database connection lost", { error: describeDbError(reason) });
  log.error("unhandled rejection", { error: describeDbError(reason) });
  process.exit(1);
});
const telemetry = startTelemetry("charges-api", config.otlpEndpoint);
const api = await startApi(config, { metrics: telemetry.scrape, logger: log }).catch((error: unknown) => {
  if (error instanceof StartupError) {
    console.error(`api: ${error.message}`);
    process.exit(1);
  }
  // AUTH_MODE=jwt with no key source: the API alone needs one, so it alone checks.
  if (error instanceof ConfigError) {
    console.error(`configuration error: ${error.message}`);
    process.exit(1);
  }
  throw error;
});
const server = serve(config.port, api.fetch, undefined, { reusePort: config.apiReusePort });
log.info("api listening", { port: server.port, reusePort: config.apiReusePort, poolSize: config.apiPoolSize });

// On SIGTERM, requests in flight get this long to finish before their connections are cut:
// far above a request's own time bounds, and well inside the 30 s an orchestrator usually
// waits before SIGKILL.
const SHUTDOWN_GRACE_MS = 10_000;
let stopping = false;

onShutdownSignal(async (signal) => {
  if (stopping) return;
  stopping = true;
  log.info("api stopping", { signal, graceMs: SHUTDOWN_GRACE_MS });
  await server.stop(SHUTDOWN_GRACE_MS);
  await api.close();
  await telemetry.shutdown();
  log.info("api stopped");
  process.exit(0);
});

// `bun api.ts`: the charges HTTP API on PORT.
import { configOrExit } from "./lib/config.ts";
import { startApi, StartupError } from "./lib/api-main.ts";
import { onShutdownSignal, serve } from "./lib/runtime.ts";
import { createLogger } from "./lib/log.ts";
import { startTelemetry } from "./telemetry.ts";

const config = configOrExit(process.env);
const log = createLogger(config.logLevel, "api");
const telemetry = startTelemetry("charges-api", config.otlpEndpoint);
const api = await startApi(config, { metrics: telemetry.scrape, logger: log }).catch((error: unknown) => {
  if (error instanceof StartupError) {
    console.error(`api: ${error.message}`);
    process.exit(1);
  }
  throw error;
});
const server = serve(config.port, api.fetch);
log.info("api listening", { port: server.port });

onShutdownSignal(async (signal) => {
  log.info("api stopping", { signal });
  await server.stop();
  await api.close();
  await telemetry.shutdown();
  process.exit(0);
});

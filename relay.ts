// `bun relay.ts`: the outbox relay (Postgres outbox → MQTT), health and metrics on RELAY_PORT,
// and the operations jobs on their intervals. The relay lives in lib/relay/ and the jobs in
// lib/ops/; this file composes them, serves, and handles signals.
import { configOrExit } from "./lib/platform/config.ts";
import { describeDbError } from "./lib/platform/db.ts";
import { createLogger } from "./lib/platform/log.ts";
import { maskUrl, maskUrlList, useKeyHashSecret } from "./lib/platform/redact.ts";
import { databaseModeLine } from "./lib/platform/pooler.ts";
import { onShutdownSignal, serve } from "./lib/platform/runtime.ts";
import { exitOnStartupError, stopOnUnhandledRejection } from "./lib/platform/startup.ts";
import { startTelemetry } from "./lib/platform/telemetry.ts";
import { createHttpServerMetrics } from "./lib/platform/http-metrics.ts";
import { startRuntimeMetrics } from "./lib/platform/runtime-metrics.ts";
import { startRelay } from "./lib/relay/start.ts";
import { newGauges, registerOpsGauges, startOpsLoop } from "./lib/ops/jobs.ts";

const config = configOrExit(process.env);
const log = createLogger(config.logLevel, "relay");
stopOnUnhandledRejection(log);
// The jobs name stale and parked keys by keyHash, as the API's request log does.
useKeyHashSecret(config.keyHashSecret, log);

// Registered before any instrument is created, so lib/'s meters are the SDK's.
const telemetry = startTelemetry("charges-relay", config.otlpEndpoint);
const runtime = startRuntimeMetrics(telemetry.provider.getMeter("charges"));
const httpMetrics = createHttpServerMetrics();
telemetry.addHistogram(httpMetrics);
const relay = await startRelay(config, { metrics: telemetry.scrape, logger: log, httpMetrics }).catch(exitOnStartupError("relay"));
const gauges = newGauges();
registerOpsGauges(gauges);
const ops = startOpsLoop(relay.jobsSql, config, gauges, log);
const server = serve(config.relayPort, relay.fetch, config.relayHost);
log.info("relay started", { host: config.relayHost, port: server.port, databaseUrl: maskUrl(config.databaseUrl), mqttUrl: maskUrlList(config.mqttUrls), batchSize: config.outboxBatchSize, mqttConnections: config.relayMqttConnections, gcEveryRows: relay.gcEveryRows });
const database = databaseModeLine(config, { listen: { pollMs: config.outboxPollMs }, locks: "ops job locks" });
log.info(database.msg, database.fields);

let shuttingDown = false;
onShutdownSignal((signal) => {
  if (shuttingDown) return;
  shuttingDown = true;
  const graceMs = config.relayTimeBounds.shutdownGraceMs;
  log.info("stopping: finishing the batches in flight", { signal, graceMs });
  // Past the grace the stop waits for what is not coming: the rows of an unfinished batch stay
  // pending (none was marked) and are published again by the next relay, at least once.
  setTimeout(() => {
    log.error("stopping took longer than RELAY_SHUTDOWN_GRACE_MS; exiting with batches unfinished, their rows left pending", { graceMs });
    process.exit(1);
  }, graceMs);
  void shutdown();
});

async function shutdown(): Promise<void> {
  try {
    await relay.stop();
    await ops.stop();
    await server.stop();
    await relay.close();
    runtime.stop();
    await telemetry.shutdown();
    log.info("relay stopped");
  } catch (error) {
    log.error("error while stopping", { error: describeDbError(error) });
  }
  process.exit(0);
}

relay.run().catch((error: unknown) => {
  console.error(`relay: loop failed: ${describeDbError(error)}`);
  process.exit(1);
});

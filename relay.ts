// `bun relay.ts`: the outbox relay (Postgres outbox → MQTT), health on RELAY_PORT.
// The loop lives in lib/relay/; this file wires config, connections, HTTP and signals.
import { configOrExit } from "./lib/shared/config.ts";
import { createSql, describeDbError, migrate } from "./lib/shared/db.ts";
import { connectBroker } from "./lib/relay/publisher.ts";
import { createLogger } from "./lib/shared/log.ts";
import { createRelay, laneCount } from "./lib/relay/loop.ts";
import { createRelayFetch } from "./lib/relay/http.ts";
import { otelRelayEvents } from "./lib/relay/metrics.ts";
import { CHARGE_CREATED, topicOf } from "./lib/events.ts";
import { onShutdownSignal, serve } from "./lib/shared/runtime.ts";
import { newGauges, registerOpsGauges, startOpsLoop } from "./lib/ops/jobs.ts";
import { startTelemetry } from "./lib/shared/telemetry.ts";

const config = configOrExit(process.env);
const log = createLogger(config.logLevel, "relay");

// Every promise of the relay's own is awaited or caught. postgres.js 3.4.9, though, can reject
// internal promises nobody awaits when its connections die (a database restart, a terminated
// backend): logged here instead of letting the runtime end the process over a blip it
// recovers from anyway.
process.on("unhandledRejection", (reason) => log.error("unhandled rejection", { error: describeDbError(reason) }));

// Registered before any instrument is created, so lib/'s meters are the SDK's.
const telemetry = startTelemetry("charges-relay", config.otlpEndpoint);

// One connection per lane (each batch holds its transaction until its PUBACKs are in)
// plus one for /readyz and one for the operations jobs; LISTEN has its own.
const sql = createSql(config.databaseUrl, {
  max: laneCount(config.outboxBatchSize) + 2,
  applicationName: "charges-relay",
});
try {
  await migrate(sql);
} catch (error) {
  console.error(`relay: cannot apply the schema to DATABASE_URL: ${describeDbError(error)}`);
  await sql.end({ timeout: 1 }).catch(() => {});
  process.exit(1);
}

// Not awaited: a broker that is away at start is retried, and the relay waits for it.
const broker = connectBroker(config.mqttUrl, { onError: (error) => log.warn("broker error", { error }) });
broker.onConnectionChange((connected) => log.info(connected ? "broker connected" : "broker connection lost"));
const relay = createRelay({
  sql,
  broker,
  batchSize: config.outboxBatchSize,
  pollMs: config.outboxPollMs,
  topicPrefix: config.mqttTopicPrefix,
  events: otelRelayEvents([topicOf(config.mqttTopicPrefix, CHARGE_CREATED)]),
  logger: log,
});
const gauges = newGauges();
registerOpsGauges(gauges);
const ops = startOpsLoop(sql, config, gauges, log);
const server = serve(config.relayPort, createRelayFetch({ sql, broker, routes: { "/metrics": telemetry.scrape } }));
log.info("relay started", { port: server.port, mqttUrl: config.mqttUrl, batchSize: config.outboxBatchSize });

let shuttingDown = false;
onShutdownSignal((signal) => {
  if (shuttingDown) return;
  shuttingDown = true;
  log.info("stopping: finishing the batches in flight", { signal });
  void shutdown();
});

async function shutdown(): Promise<void> {
  try {
    await relay.stop();
    await ops.stop();
    await server.stop();
    await broker.close();
    await sql.end({ timeout: 5 });
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

// Assembles the relay process from config: pools, broker, loop, metrics (OpenTelemetry API only,
// labelled by destination topic, never a per-event value) and its HTTP surface.
import type { Config } from "../platform/config.ts";
import { createSql } from "../platform/db.ts";
import { isTransactionPooled } from "../platform/pooler.ts";
import { createLogger, type Logger } from "../platform/log.ts";
import { openDatabase } from "../platform/startup.ts";
import { youngCollection, type FetchHandler } from "../platform/runtime.ts";
import { createGcPacer, UNPACED } from "../platform/gc-pacer.ts";
import { EVENT_TYPES, topicOf } from "../charges/events.ts";
import { asyncApiJson } from "./asyncapi.ts";
import { connectBroker } from "./publisher.ts";
import { createRelay, laneCount, type RelayEvents } from "./loop.ts";
import { createRelayFetch } from "./http.ts";
import type { HttpServerMetrics } from "../platform/http-metrics.ts";
import { observePool } from "../platform/runtime-metrics.ts";
import { transactionsInProgress } from "../platform/tx.ts";
import { openConnections } from "../platform/db.ts";
import { metrics } from "@opentelemetry/api";

// Beyond one per lane: one for /readyz and one for the ops jobs.
const EXTRA_CONNECTIONS = 2;
// postgres.js waits this long on a pool whose connections were killed under it; the batches are settled.
const POOL_CLOSE_GRACE_S = 1;
// About as often as the allocator returns memory to the kernel at drain speed; each costs a millisecond.
const GC_EVERY_ROWS = 4000;

export type RelayProcess = Awaited<ReturnType<typeof startRelay>>;

interface RelayProcessOptions {
  readonly metrics?: () => Promise<Response>;
  readonly logger?: Logger;
  readonly httpMetrics?: HttpServerMetrics;
}

const RELAY_POOL_NAME = "charges-relay";
const RELAY_DIRECT_POOL_NAME = "charges-relay-direct";
// The ops loop runs one job at a time.
const DIRECT_CONNECTIONS = 1;

/** Connects and migrates (a StartupError when it cannot); the loop waits for the broker. */
export async function startRelay(config: Config, options: RelayProcessOptions = {}) {
  const log = options.logger ?? createLogger(config.logLevel, "relay");
  const poolSize = laneCount(config.outboxBatchSize) + EXTRA_CONNECTIONS;
  // A claim or a mark that trips these fails its batch: the loop backs off and drains again.
  const bounds = { statementTimeoutMs: config.relayTimeBounds.statementTimeoutMs, lockTimeoutMs: config.relayTimeBounds.lockTimeoutMs };
  const sql = await openDatabase(config.databaseUrl, { max: poolSize, applicationName: RELAY_POOL_NAME, pooler: config.databasePooler, countOpen: true, ...bounds });
  const direct = config.databaseDirectUrl === undefined ? undefined : createSql(config.databaseDirectUrl, { max: DIRECT_CONNECTIONS, applicationName: RELAY_DIRECT_POOL_NAME, ...bounds });
  // LISTEN's own client would never be uncounted on a counted pool: it gets a pool of its own.
  const listenPool = direct ?? (isTransactionPooled(sql) ? null : createSql(config.databaseUrl, { max: 1, applicationName: RELAY_POOL_NAME, ...bounds }));
  const broker = connectBroker(config.mqttUrls, {
    connections: config.relayMqttConnections,
    version: config.mqttProtocol,
    onError: (error) => log.warn("broker connection failed", { error }),
  });
  broker.onConnectionChange((connected) => log.info(connected ? "broker connected" : "broker connection lost", { broker: broker.url }));
  broker.onMove((move) => log.warn("broker lost; moving to the next of MQTT_URL", { ...move }));
  const collect = await youngCollection();
  const relay = createRelay({
    pacer: collect ? createGcPacer(collect, GC_EVERY_ROWS) : UNPACED,
    sql,
    listenSql: listenPool,
    broker,
    batchSize: config.outboxBatchSize,
    pollMs: config.outboxPollMs,
    gatherMs: config.relayGatherMs,
    topicPrefix: config.mqttTopicPrefix,
    events: otelRelayEvents(EVENT_TYPES.map((type) => topicOf(config.mqttTopicPrefix, type))),
    logger: log,
  });
  // Busy: the transactions in progress; postgres.js counts none publicly.
  observePool(metrics.getMeter("charges"), {
    name: RELAY_POOL_NAME,
    max: poolSize,
    busy: () => Math.min(poolSize, transactionsInProgress(sql)),
    open: () => openConnections(sql) ?? 0,
  });
  if (direct) observePool(metrics.getMeter("charges"), { name: RELAY_DIRECT_POOL_NAME, max: DIRECT_CONNECTIONS });
  const asyncApi: FetchHandler = () =>
    new Response(asyncApiJson(config.mqttTopicPrefix), { headers: { "content-type": "application/json" } });
  const routes: Record<string, FetchHandler> = { "/asyncapi.json": asyncApi };
  if (options.metrics) routes["/metrics"] = options.metrics;
  return {
    sql,
    jobsSql: direct ?? sql,
    broker,
    relay,
    /** Null where the runtime has no young collection (Deno). */
    gcEveryRows: collect ? GC_EVERY_ROWS : null,
    fetch: createRelayFetch({ sql, broker, routes, logger: log, httpMetrics: options.httpMetrics }),
    run: (): Promise<void> => relay.run(),
    stop: (): Promise<void> => relay.stop(),
    async close(): Promise<void> {
      await broker.close();
      await sql.end({ timeout: POOL_CLOSE_GRACE_S });
      await listenPool?.end({ timeout: POOL_CLOSE_GRACE_S });
    },
  };
}

// Fine below 50 ms (the latency target), coarse up to minutes (backlogs, retries).
const LAG_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** `knownDestinations` start at zero: a rate() alert works before the first error. */
function otelRelayEvents(knownDestinations: readonly string[]): RelayEvents {
  const meter = metrics.getMeter("charges");
  const published = meter.createCounter("outbox_published_total", {
    description: "Outbox rows published and acknowledged by the broker",
  });
  const errors = meter.createCounter("outbox_publish_errors_total", {
    description: "Publishes that failed, timed out or were released because the broker went away",
  });
  const lag = meter.createHistogram("outbox_delivery_lag_seconds", {
    description: "Seconds from the outbox row's created_at to the broker's PUBACK",
    advice: { explicitBucketBoundaries: LAG_BUCKETS_S },
  });
  for (const destination of knownDestinations) {
    published.add(0, { destination });
    errors.add(0, { destination });
  }
  return {
    onPublished(destination, lagSeconds) {
      const attributes = { destination };
      published.add(lagSeconds.length, attributes);
      for (const seconds of lagSeconds) lag.record(seconds, attributes);
    },
    onPublishError(destination, count) {
      errors.add(count, { destination });
    },
  };
}

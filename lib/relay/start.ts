// Assembles the relay process from config: the pool, the schema, the broker connection, the
// loop, its metrics and its HTTP surface (/healthz, /readyz, /metrics, /asyncapi.json).
import type { Config } from "../platform/config.ts";
import { createSql, type Sql } from "../platform/db.ts";
import { isTransactionPooled } from "../platform/pooler.ts";
import { createLogger, type Logger } from "../platform/log.ts";
import { openDatabase } from "../platform/startup.ts";
import { youngCollection, type FetchHandler } from "../platform/runtime.ts";
import { createGcPacer, UNPACED } from "../platform/gc-pacer.ts";
import { EVENT_TYPES, topicOf } from "../charges/events.ts";
import { asyncApiJson } from "./asyncapi.ts";
import { connectBroker, type Broker } from "./publisher.ts";
import { createRelay, laneCount, type Relay } from "./loop.ts";
import { createRelayFetch } from "./http.ts";
import { otelRelayEvents } from "./metrics.ts";
import type { HttpServerMetrics } from "../platform/http-metrics.ts";
import { observePool } from "../platform/runtime-metrics.ts";
import { transactionsInProgress } from "../platform/tx.ts";
import { openConnections } from "../platform/db.ts";
import { metrics } from "@opentelemetry/api";

// Beyond one connection per lane (each batch holds its transaction until its PUBACKs are in):
// one for /readyz and one for the operations jobs the entrypoint runs beside the loop.
// LISTEN has a connection of its own.
const EXTRA_CONNECTIONS = 2;
// close() comes after stop() (every batch settled) and the ops loop's stop: nothing of ours is
// left running. postgres.js still waits this long on a pool whose connections were killed
// under it (it keeps one it never finishes with), so the grace is short.
const POOL_CLOSE_GRACE_S = 1;
// One young collection per this many rows answered: at drain speed, about as often as the
// allocator returns free memory to the kernel (lib/platform/gc-pacer.ts). Each collection
// costs a millisecond or more whatever it frees, so fewer, larger ones cost less per row at
// the same peak memory.
const GC_EVERY_ROWS = 4000;

export interface RelayProcess {
  readonly sql: Sql;
  /** Where the ops jobs take their locks and run: DATABASE_DIRECT_URL's pool when set, else `sql` (job-lock.ts). */
  readonly jobsSql: Sql;
  readonly broker: Broker;
  readonly relay: Relay;
  /** Rows answered per young collection (lib/platform/gc-pacer.ts); null where the runtime has none to pace (Deno). */
  readonly gcEveryRows: number | null;
  /** /healthz, /readyz, /asyncapi.json and, when given, /metrics. */
  readonly fetch: FetchHandler;
  /** The loop; resolves after stop(). */
  run(): Promise<void>;
  /** No new claims; the batches in flight finish (PUBACKs awaited, rows marked). */
  stop(): Promise<void>;
  /** Closes the broker connection and the pool; after stop(). */
  close(): Promise<void>;
}

export interface RelayProcessOptions {
  /** Prometheus exposition for GET /metrics (the entrypoint owns the SDK). */
  readonly metrics?: () => Promise<Response>;
  readonly logger?: Logger;
  /** Where the operator port's answers are counted (http_server_request_duration_seconds). */
  readonly httpMetrics?: HttpServerMetrics;
}

// The pool's application_name, also its name on db_client_connections_max.
const RELAY_POOL_NAME = "charges-relay";
// The pool on DATABASE_DIRECT_URL, past the pooler, named apart so that pg_stat_activity shows
// which of the relay's connections bypass it.
const RELAY_DIRECT_POOL_NAME = "charges-relay-direct";
// One for the ops loop, which runs one job at a time; LISTEN opens a connection of its own.
const DIRECT_CONNECTIONS = 1;

/** Connects and migrates (a StartupError with one clear line when it cannot); the broker is awaited by the loop. */
export async function startRelay(config: Config, options: RelayProcessOptions = {}): Promise<RelayProcess> {
  const log = options.logger ?? createLogger(config.logLevel, "relay");
  const poolSize = laneCount(config.outboxBatchSize) + EXTRA_CONNECTIONS;
  // A claim or a mark that trips these fails its batch: the loop backs off and drains again.
  const bounds = { statementTimeoutMs: config.relayTimeBounds.statementTimeoutMs, lockTimeoutMs: config.relayTimeBounds.lockTimeoutMs };
  const sql = await openDatabase(config.databaseUrl, { max: poolSize, applicationName: RELAY_POOL_NAME, pooler: config.databasePooler, countOpen: true, ...bounds });
  const direct = config.databaseDirectUrl === undefined ? undefined : createSql(config.databaseDirectUrl, { max: DIRECT_CONNECTIONS, applicationName: RELAY_DIRECT_POOL_NAME, ...bounds });
  // LISTEN gets a client of its own from postgres.js, which a counted pool would count and
  // never uncount (open-connections.ts): without a direct URL it listens through this one,
  // named as the pool so that pg_stat_activity shows it with the relay's other connections.
  const listenPool = direct ?? (isTransactionPooled(sql) ? null : createSql(config.databaseUrl, { max: 1, applicationName: RELAY_POOL_NAME, ...bounds }));
  // Not awaited: a broker that is away at start is retried, and the relay waits for it.
  const broker = connectBroker(config.mqttUrls, {
    connections: config.relayMqttConnections,
    version: config.mqttProtocol,
    // Once per cause, not once per retry (publisher.ts); /readyz names the last one.
    onError: (error) => log.warn("broker connection failed", { error }),
  });
  broker.onConnectionChange((connected) => log.info(connected ? "broker connected" : "broker connection lost", { broker: broker.url }));
  // Once per loss, by the first connection to notice it (lib/platform/mqtt-brokers.ts).
  broker.onMove((move) => log.warn("broker lost; moving to the next of MQTT_URL", { ...move }));
  const collect = await youngCollection();
  const relay = createRelay({
    pacer: collect ? createGcPacer(collect, GC_EVERY_ROWS) : UNPACED,
    sql,
    // Behind a transaction pooler without a direct URL, nowhere: the relay polls.
    listenSql: listenPool,
    broker,
    batchSize: config.outboxBatchSize,
    pollMs: config.outboxPollMs,
    gatherMs: config.relayGatherMs,
    topicPrefix: config.mqttTopicPrefix,
    events: otelRelayEvents(EVENT_TYPES.map((type) => topicOf(config.mqttTopicPrefix, type))),
    logger: log,
  });
  // Busy: the batches' (and the jobs') transactions in progress; postgres.js counts none publicly.
  observePool(metrics.getMeter("charges"), {
    name: RELAY_POOL_NAME,
    max: poolSize,
    busy: () => Math.min(poolSize, transactionsInProgress(sql)),
    open: () => openConnections(sql) ?? 0,
  });
  if (direct) observePool(metrics.getMeter("charges"), { name: RELAY_DIRECT_POOL_NAME, max: DIRECT_CONNECTIONS });
  const routes: Record<string, FetchHandler> = { "/asyncapi.json": asyncApiRoute(config.mqttTopicPrefix) };
  if (options.metrics) routes["/metrics"] = options.metrics;
  return {
    sql,
    jobsSql: direct ?? sql,
    broker,
    relay,
    gcEveryRows: collect ? GC_EVERY_ROWS : null,
    fetch: createRelayFetch({ sql, broker, routes, logger: log, httpMetrics: options.httpMetrics }),
    run: () => relay.run(),
    stop: () => relay.stop(),
    async close() {
      await broker.close();
      await sql.end({ timeout: POOL_CLOSE_GRACE_S });
      await listenPool?.end({ timeout: POOL_CLOSE_GRACE_S });
    },
  };
}

/**
 * GET /asyncapi.json: the AsyncAPI 3 document of the events this relay publishes, with the
 * topics under its own MQTT_TOPIC_PREFIX; built at the first request and kept.
 */
function asyncApiRoute(prefix: string): FetchHandler {
  return () => new Response(asyncApiJson(prefix), { headers: { "content-type": "application/json" } });
}

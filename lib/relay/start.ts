// Assembles the relay process from config: pools, broker, loop, metrics (OpenTelemetry API only,
// labelled by destination topic, never a per-event value) and its HTTP surface.
import type { Config } from "../platform/config.ts";
import { createSql, openConnections, probeDatabase, type Sql } from "../platform/db.ts";
import { isTransactionPooled } from "../platform/pooler.ts";
import { createLogger, type Logger } from "../platform/log.ts";
import { openDatabase } from "../platform/startup.ts";
import { youngCollection, type FetchHandler } from "../platform/runtime.ts";
import { createGcPacer, UNPACED } from "../platform/gc-pacer.ts";
import { EVENT_TYPES, topicOf } from "../charges/events.ts";
import { asyncApiJson } from "./asyncapi.ts";
import { connectBroker, type Broker } from "./publisher.ts";
import { createRelay, laneCount, type RelayEvents } from "./loop.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../platform/http-metrics.ts";
import { observePool } from "../platform/runtime-metrics.ts";
import { transactionsInProgress } from "../platform/tx.ts";
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
  const bounds = config.relayTimeBounds;
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
    jobsSql: direct ?? sql,
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
    onPublishError: (destination, count) => errors.add(count, { destination }),
  };
}

interface RelayAppDeps {
  readonly sql: Sql;
  readonly broker: Broker;
  readonly routes?: Readonly<Record<string, FetchHandler>>;
  /** Hears why the database is down: the /readyz body only says that it is. */
  readonly logger: Logger;
  readonly httpMetrics?: HttpServerMetrics;
}

const READY_DB_TIMEOUT_MS = 1000;

function json(status: number, body: unknown, type = "application/json", headers = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": type, ...headers } });
}

// "about:blank" problems: the title is the status's own phrase (RFC 9457 §4.2.1).
function problem(status: number, title: string, detail: string, headers: Record<string, string> = {}): Response {
  return json(status, { type: "about:blank", title, status, detail }, "application/problem+json", headers);
}

// Not parsed as a URL: the runtime builds request.url from the Host header, which may be absent or odd.
function pathOf(url: string): string {
  const origin = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/.exec(url);
  const rest = origin ? url.slice(origin[0].length) : url;
  const end = rest.search(/[?#]/);
  const path = end < 0 ? rest : rest.slice(0, end);
  return path.startsWith("/") ? path : `/${path}`;
}

function createRelayFetch(deps: RelayAppDeps): FetchHandler {
  const routes: Record<string, FetchHandler> = {
    "/healthz": () => json(200, { status: "ok" }),
    "/readyz": async () => {
      const database = await probeDatabase(deps.sql, READY_DB_TIMEOUT_MS);
      if (database.error) deps.logger.warn("readiness: database down", { error: database.error });
      const broker = deps.broker.connected;
      const ready = database.up && broker;
      return json(ready ? 200 : 503, {
        status: ready ? "ready" : "not ready",
        database: database.up ? "up" : "down",
        broker: broker ? "connected" : "disconnected",
        brokerUrl: deps.broker.url,
        ...(!broker && deps.broker.lastError !== undefined && { brokerError: deps.broker.lastError }),
      });
    },
    ...deps.routes,
  };
  const { httpMetrics } = deps;
  return async (request) => {
    const started = performance.now();
    const path = pathOf(request.url);
    const known = Object.hasOwn(routes, path);
    const response = await answer(request, path, known ? routes[path] : undefined);
    // A 405 on a known path still names its route: the path is a template with no parameter.
    httpMetrics?.record(request.method, known ? path : UNMATCHED_ROUTE, response.status, (performance.now() - started) / 1000);
    return response;
  };

  async function answer(request: Request, path: string, route: FetchHandler | undefined): Promise<Response> {
    try {
      if (!route) return problem(404, "Not Found", `no route ${path}; this port serves ${Object.keys(routes).join(", ")}`);
      if (request.method !== "GET" && request.method !== "HEAD") {
        return problem(405, "Method Not Allowed", `${path} answers GET and HEAD`, { allow: "GET, HEAD" });
      }
      return await route(request);
    } catch (error) {
      deps.logger.error("relay http handler failed", { error: error instanceof Error ? error.message : String(error) });
      return problem(500, "Internal Server Error", "an unexpected error occurred");
    }
  }
}

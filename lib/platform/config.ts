// Configuration: read from the environment once, validated, frozen (docs/configuration.md). A bad
// value is a ConfigError naming the variable; the entrypoints print its message and exit 1.
import { ConfigError, databaseUrl, flag, host, integer, oneOf, secret, url, urlList, type Env } from "./config-values.ts";
import { processorConfig } from "./config-processor.ts";
import { Secret } from "./redact.ts";

export { ConfigError, type Env } from "./config-values.ts";

const MQTT_PROTOCOLS = ["5", "3.1.1", "auto"] as const;
export type MqttProtocol = (typeof MQTT_PROTOCOLS)[number];
const DATABASE_POOLERS = ["none", "transaction"] as const;
export type DatabasePooler = (typeof DATABASE_POOLERS)[number];
const LOG_LEVELS = ["debug", "info", "warn", "error", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
const AUTH_MODES = ["jwt", "none"] as const;
/** `ascii`: printable ASCII; `unicode`: letters, marks, digits, punctuation and symbols of any script. */
const TENANT_IDS = ["ascii", "unicode"] as const;
export type TenantIds = (typeof TENANT_IDS)[number];

export type Config = ReturnType<typeof loadConfig>;
export type AuthConfig = ReturnType<typeof authConfig>;
export type AdmissionConfig = ReturnType<typeof admissionConfig>;

const TEN_YEARS_S = 10 * 365 * 24 * 3600;
const HOUR_MS = 3_600_000;
// Rows: larger claims drain a backlog faster, up to about this (bench/README.md, "Relay drain").
export const DEFAULT_OUTBOX_BATCH_SIZE = 2000;
// Longer than a redelivery can come: the broker session (a day) and days of relay outage.
const INBOX_RETENTION_S = 7 * 86_400;
// A crashed member gets the predecessor back within a minute or two under a supervisor.
export const DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS = 300_000;
// Each API pool connection is a Postgres backend: a pool past this is a typo.
const MAX_API_POOL_SIZE = 1000;
// The relay's idle fallback poll (a NOTIFY wakes it); behind a transaction pooler without
// DATABASE_DIRECT_URL it cannot LISTEN, and the poll is its only wake-up.
const OUTBOX_POLL_MS = 1000;
const OUTBOX_POLL_MS_WITHOUT_LISTEN = 100;
// RFC 7518 §3.2: an HMAC key shorter than the hash output (256 bits) can be brute-forced.
const MIN_SECRET_BYTES = 32;

export function loadConfig(env: Env) {
  const pooler = oneOf("DATABASE_POOLER", env.DATABASE_POOLER?.trim() || "none", DATABASE_POOLERS);
  const directUrl = databaseUrl(env, "DATABASE_DIRECT_URL", "") || undefined;
  // Without a pooler every connection is direct: a second URL would only be a second thing to keep right.
  if (directUrl !== undefined && pooler === "none") {
    throw new ConfigError("DATABASE_DIRECT_URL is only used with DATABASE_POOLER=transaction; set that or unset it");
  }
  const pollMs = pooler === "transaction" && directUrl === undefined ? OUTBOX_POLL_MS_WITHOUT_LISTEN : OUTBOX_POLL_MS;
  // At most a day, the MQTT session expiry: a predecessor still in a session comes no later.
  const gapTimeoutMs = integer(env, "SUBSCRIBER_GAP_TIMEOUT_MS", DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS, 1, 86_400_000);
  return Object.freeze({
    databaseUrl: databaseUrl(env, "DATABASE_URL", "postgres://localhost:5432/postgres"),
    databasePooler: pooler,
    databaseDirectUrl: directUrl,
    mqttUrls: urlList(env, "MQTT_URL", "mqtt://localhost:1883", ["mqtt:", "mqtts:", "tcp:", "ws:", "wss:"]),
    port: integer(env, "PORT", 3000, 0, 65535),
    relayPort: integer(env, "RELAY_PORT", 9465, 0, 65535),
    relayHost: host(env, "RELAY_HOST", "0.0.0.0"),
    relayTimeBounds: relayTimeBounds(env),
    idempotencyTtlSeconds: integer(env, "IDEMPOTENCY_TTL_SECONDS", 86_400, 1, TEN_YEARS_S),
    // 30 days, as Stripe's v2 API keeps its keys: a client retrying late learns where its resource is.
    idempotencyTombstoneSeconds: integer(env, "IDEMPOTENCY_TOMBSTONE_SECONDS", 30 * 86_400, 0, TEN_YEARS_S),
    outboxBatchSize: integer(env, "OUTBOX_BATCH_SIZE", DEFAULT_OUTBOX_BATCH_SIZE, 1, 10_000),
    outboxPollMs: integer(env, "OUTBOX_POLL_MS", pollMs, 1, HOUR_MS),
    // A few Receive Maximum windows drain faster, more do not (bench/README.md, "Several MQTT connections").
    relayMqttConnections: integer(env, "RELAY_MQTT_CONNECTIONS", 3, 1, 16),
    // Fewer claims cost less CPU per event, for at most this much latency (bench/README.md, "Relay
    // beside the API"); past a second events would wait longer than a poll makes them.
    relayGatherMs: integer(env, "RELAY_GATHER_MS", 40, 0, 1000),
    outboxRetentionSeconds: integer(env, "OUTBOX_RETENTION_SECONDS", 7 * 86_400, 1, TEN_YEARS_S),
    subscriberInboxRetentionSeconds: integer(env, "SUBSCRIBER_INBOX_RETENTION_SECONDS", INBOX_RETENTION_S, 86_400, TEN_YEARS_S),
    subscriberGapTimeoutMs: gapTimeoutMs,
    subscriberApi: subscriberApiConfig(env, gapTimeoutMs),
    mqttTopicPrefix: topicPrefix(env),
    mqttProtocol: oneOf("MQTT_PROTOCOL_VERSION", env.MQTT_PROTOCOL_VERSION?.trim() || "auto", MQTT_PROTOCOLS),
    logLevel: oneOf("LOG_LEVEL", env.LOG_LEVEL ?? "info", LOG_LEVELS),
    otlpEndpoint: env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || undefined,
    apiTimeBounds: apiTimeBounds(env),
    // More concurrent commits share more flushes (bench/README.md, "API latency and pool size").
    apiPoolSize: integer(env, "API_POOL_SIZE", 32, 1, MAX_API_POOL_SIZE),
    // More did not add charges and lengthened the tail (bench/README.md, "Group commit").
    apiChargeStatements: integer(env, "API_CHARGE_STATEMENTS", 2, 1, MAX_API_POOL_SIZE),
    apiReusePort: flag(env, "API_REUSE_PORT"),
    apiHttpMetrics: flag(env, "API_HTTP_METRICS", true),
    auth: authConfig(env),
    keyHashSecret: Secret.of(secret("API_KEY_HASH_SECRET", env.API_KEY_HASH_SECRET, MIN_SECRET_BYTES)),
    admission: admissionConfig(env),
    processor: processorConfig(env),
  });
}

function topicPrefix(env: Env): string {
  const raw = env.MQTT_TOPIC_PREFIX ?? "";
  // MQTT forbids wildcards in a publish topic and NUL anywhere.
  if (/[#+\u0000]/.test(raw)) {
    throw new ConfigError(`MQTT_TOPIC_PREFIX must not contain '#', '+' or NUL, got "${raw}"`);
  }
  return raw;
}

// The relay's bounds trip only on a stalled database or a claim queued long behind DDL; its grace
// lets a batch finish its publish timeout (10 s), inside an orchestrator's 30 s before SIGKILL.
function relayTimeBounds(env: Env) {
  return Object.freeze({
    statementTimeoutMs: integer(env, "RELAY_STATEMENT_TIMEOUT_MS", 30_000, 1, HOUR_MS),
    lockTimeoutMs: integer(env, "RELAY_LOCK_TIMEOUT_MS", 10_000, 1, HOUR_MS),
    shutdownGraceMs: integer(env, "RELAY_SHUTDOWN_GRACE_MS", 20_000, 1, HOUR_MS),
  });
}

// Every API bound trips long before a client's own timeout (30 s and more), so it gets a 503, and
// far above what a healthy database takes.
function apiTimeBounds(env: Env) {
  const bounds = {
    statementTimeoutMs: integer(env, "API_STATEMENT_TIMEOUT_MS", 5_000, 1, HOUR_MS),
    lockTimeoutMs: integer(env, "API_LOCK_TIMEOUT_MS", 2_000, 1, HOUR_MS),
    poolWaitMs: integer(env, "API_POOL_WAIT_MS", 2_000, 1, HOUR_MS),
    requestTimeoutMs: integer(env, "API_REQUEST_TIMEOUT_MS", 10_000, 1, HOUR_MS),
  };
  // A statement starts only while it can still end within the request's deadline.
  const least = bounds.statementTimeoutMs + bounds.poolWaitMs;
  if (bounds.requestTimeoutMs < least) {
    throw new ConfigError(`API_REQUEST_TIMEOUT_MS must be at least API_STATEMENT_TIMEOUT_MS + API_POOL_WAIT_MS (${least}), got ${bounds.requestTimeoutMs}`);
  }
  return Object.freeze(bounds);
}

/** How the API authenticates `/charges` requests; the API alone decides whether a key source is required. */
function authConfig(env: Env) {
  const mode = oneOf("AUTH_MODE", env.AUTH_MODE?.trim() || "jwt", AUTH_MODES);
  const jwtSecret = secret("AUTH_JWT_SECRET", env.AUTH_JWT_SECRET, MIN_SECRET_BYTES);
  const tenantIds = oneOf("AUTH_TENANT_IDS", env.AUTH_TENANT_IDS?.trim() || "ascii", TENANT_IDS);
  return Object.freeze({
    mode,
    jwtSecret,
    jwksUrl: env.AUTH_JWKS_URL?.trim() ? url(env, "AUTH_JWKS_URL", "", ["https:", "http:"]) : undefined,
    issuer: env.AUTH_ISSUER?.trim() || undefined,
    audience: env.AUTH_AUDIENCE?.trim() || undefined,
    tenantClaim: env.AUTH_TENANT_CLAIM?.trim() || "sub",
    tenantIds,
  });
}

// A bearer token is one header value: visible ASCII, no spaces.
const TOKEN_CHARS = /^[\x21-\x7e]{1,8192}$/;

// With SUBSCRIBER_API_URL and _TOKEN the subscriber fills a gap from the API before the gap
// timeout (lib/subscriber/gap-fill.ts); with neither, it waits for the broker alone.
function subscriberApiConfig(env: Env, gapTimeoutMs: number) {
  const rawUrl = env.SUBSCRIBER_API_URL?.trim() || undefined;
  const token = env.SUBSCRIBER_API_TOKEN?.trim() || undefined;
  if (rawUrl === undefined && token === undefined) return undefined;
  if (rawUrl === undefined) throw new ConfigError("SUBSCRIBER_API_TOKEN is set without SUBSCRIBER_API_URL; set both to fill gaps from the API, or neither");
  if (token === undefined) throw new ConfigError("SUBSCRIBER_API_URL is set without SUBSCRIBER_API_TOKEN (a bearer token of the events' tenant); set both, or neither");
  if (!TOKEN_CHARS.test(token)) throw new ConfigError(`SUBSCRIBER_API_TOKEN must be visible ASCII without spaces (length ${token.length})`);
  // A late predecessor (a share group, a relay's chain) comes within a second or two; a lost one
  // is asked for long before the gap timeout.
  const fillAfterMs = integer(env, "SUBSCRIBER_GAP_FILL_AFTER_MS", 5000, 0, gapTimeoutMs);
  if (fillAfterMs >= gapTimeoutMs) {
    throw new ConfigError(`SUBSCRIBER_GAP_FILL_AFTER_MS (${fillAfterMs}) must be less than SUBSCRIBER_GAP_TIMEOUT_MS (${gapTimeoutMs}): a gap is skipped at the timeout`);
  }
  const origin = url(env, "SUBSCRIBER_API_URL", "", ["http:", "https:"]).replace(/\/+$/, "");
  return Object.freeze({ url: origin, token: new Secret(token), fillAfterMs });
}

const MAX_RATE_LIMIT_PER_S = 1_000_000;
const MAX_IN_FLIGHT = 1_000_000;

// The API's admission control (docs/configuration.md, "Admission control").
function admissionConfig(env: Env) {
  // Above what one tenant can make one process serve (bench/README.md): a deployment sets its own.
  const rateLimitPerS = integer(env, "API_RATE_LIMIT", 10_000, 0, MAX_RATE_LIMIT_PER_S);
  // One second's worth: a tenant at its rate never waits, a burst of a second passes.
  const rateBurst = integer(env, "API_RATE_BURST", Math.max(1, rateLimitPerS), 1, MAX_RATE_LIMIT_PER_S);
  const operatorPort = env.OPERATOR_PORT?.trim() ? integer(env, "OPERATOR_PORT", 0, 1, 65535) : undefined;
  const port = integer(env, "PORT", 3000, 0, 65535);
  if (operatorPort !== undefined && operatorPort === port) {
    throw new ConfigError(`OPERATOR_PORT must differ from PORT, both are ${port}`);
  }
  // Far beyond the load bench/ and chaos/ drive; a waiting request is at most a 16 KiB body.
  const maxInFlight = integer(env, "API_MAX_IN_FLIGHT", 1000, 1, MAX_IN_FLIGHT);
  return Object.freeze({
    rateLimitPerS,
    rateBurst,
    maxInFlight,
    // Half: one tenant holding its whole share (bodies that never come) leaves half to the others.
    maxInFlightPerTenant: integer(env, "API_MAX_IN_FLIGHT_PER_TENANT", Math.ceil(maxInFlight * 0.5), 1, maxInFlight),
    // One key's requests run one after another: a few cover a client's honest retries.
    maxInFlightPerKey: integer(env, "API_MAX_IN_FLIGHT_PER_KEY", 8, 1, MAX_IN_FLIGHT),
    // A slow mobile link's worst for 16 KiB, before Bun's idle timeout (10 s) cuts without an answer.
    bodyTimeoutMs: integer(env, "API_BODY_TIMEOUT_MS", 5000, 100, 60_000),
    // A flood of scrapes costs one render a second.
    metricsMaxAgeMs: integer(env, "API_METRICS_MAX_AGE_MS", 1000, 0, 60_000),
    // A client that never waits its Retry-After makes a few refused requests a second, not
    // thousands (bench/README.md, "a tenant at its limit").
    refusalHoldMs: integer(env, "API_RATE_LIMIT_HOLD_MS", 250, 0, 1000),
    operatorPort,
    // Loopback by default: the operator's endpoints are not the public's.
    operatorHost: host(env, "OPERATOR_HOST", "127.0.0.1"),
  });
}

/** For entrypoints: load or print the one clear line and exit. */
export function configOrExit(env: Env): Config {
  try {
    return loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`configuration error: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }
}

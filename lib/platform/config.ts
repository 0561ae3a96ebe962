// Configuration: read from the environment once, validated, frozen (docs/configuration.md says
// what each variable means). A bad value is a ConfigError naming the variable; the entrypoints
// print its message and exit 1.
import { ConfigError, databaseUrl, flag, host, integer, oneOf, secret, url, urlList, type Env } from "./config-values.ts";
import { processorConfig, type ProcessorConfig } from "./config-processor.ts";
import { subscriberApiConfig, type SubscriberApiConfig } from "./config-subscriber.ts";
import { Secret } from "./redact.ts";
import { admissionConfig, type AdmissionConfig } from "./config-admission.ts";

export { ConfigError, type Env } from "./config-values.ts";
export type { AdmissionConfig } from "./config-admission.ts";

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

export interface Config {
  readonly databaseUrl: string;
  readonly databasePooler: DatabasePooler;
  /** Postgres itself, past the pooler: for what needs a session of its own (LISTEN, session advisory locks). */
  readonly databaseDirectUrl: string | undefined;
  /** The brokers in the order they are tried (mqtt-brokers.ts). */
  readonly mqttUrls: readonly string[];
  readonly port: number;
  readonly relayPort: number;
  readonly relayHost: string;
  readonly relayTimeBounds: RelayTimeBounds;
  readonly idempotencyTtlSeconds: number;
  readonly idempotencyTombstoneSeconds: number;
  readonly outboxBatchSize: number;
  readonly relayMqttConnections: number;
  readonly relayGatherMs: number;
  readonly outboxPollMs: number;
  readonly outboxRetentionSeconds: number;
  readonly subscriberInboxRetentionSeconds: number;
  readonly subscriberGapTimeoutMs: number;
  /** Where the reference subscriber asks for the events of a gap; undefined: it does not. */
  readonly subscriberApi: SubscriberApiConfig | undefined;
  readonly mqttTopicPrefix: string;
  readonly mqttProtocol: MqttProtocol;
  readonly logLevel: LogLevel;
  readonly otlpEndpoint: string | undefined;
  readonly apiTimeBounds: ApiTimeBounds;
  /** Connections in the API process's pool; N processes hold N times this many. */
  readonly apiPoolSize: number;
  readonly apiChargeStatements: number;
  readonly apiReusePort: boolean;
  readonly apiHttpMetrics: boolean;
  readonly auth: AuthConfig;
  /** Unset: each process makes one (redact.ts). */
  readonly keyHashSecret: Secret | undefined;
  readonly admission: AdmissionConfig;
  readonly processor: ProcessorConfig;
}

/** How the API authenticates `/charges` requests; the API alone decides whether a key source is required. */
export interface AuthConfig {
  readonly mode: (typeof AUTH_MODES)[number];
  readonly jwtSecret: string | undefined;
  readonly jwksUrl: string | undefined;
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
  readonly tenantClaim: string;
  readonly tenantIds: TenantIds;
}

export interface ApiTimeBounds {
  readonly statementTimeoutMs: number;
  readonly lockTimeoutMs: number;
  readonly poolWaitMs: number;
  readonly requestTimeoutMs: number;
}

export interface RelayTimeBounds {
  readonly statementTimeoutMs: number;
  readonly lockTimeoutMs: number;
  /** From SIGTERM: the batches in flight get this long to finish, then the process exits anyway. */
  readonly shutdownGraceMs: number;
}

const TEN_YEARS_S = 10 * 365 * 24 * 3600;
const HOUR_MS = 3_600_000;
// Rows: larger claims mean fewer transactions per row on a backlog, up to where they drain no
// faster (bench/README.md, "Relay drain"); claims start small and grow (lib/relay/lanes.ts).
export const DEFAULT_OUTBOX_BATCH_SIZE = 2000;
// The reference subscriber's inbox must remember an event longer than a redelivery can come: a
// week covers the broker session (lib/subscriber/session.ts) and days of relay outage.
const INBOX_RETENTION_S = 7 * 86_400;
// A crashed member gets the predecessor back within a minute or two under a supervisor; at most
// a day, the MQTT session expiry: a predecessor still in a session comes no later.
export const DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS = 300_000;
// Each API pool connection is a Postgres backend: a pool past this is a typo.
const MAX_API_POOL_SIZE = 1000;
// The relay's idle fallback poll (a NOTIFY wakes it); behind a transaction pooler without
// DATABASE_DIRECT_URL it cannot LISTEN, and the poll is its only wake-up.
const OUTBOX_POLL_MS = 1000;
const OUTBOX_POLL_MS_WITHOUT_LISTEN = 100;
// RFC 7518 §3.2: an HMAC key shorter than the hash output (256 bits) can be brute-forced.
const MIN_SECRET_BYTES = 32;

export function loadConfig(env: Env): Config {
  const pooler = oneOf("DATABASE_POOLER", env.DATABASE_POOLER?.trim() || "none", DATABASE_POOLERS);
  const directUrl = databaseUrl(env, "DATABASE_DIRECT_URL", "") || undefined;
  // Without a pooler every connection is direct: a second URL would only be a second thing to keep right.
  if (directUrl !== undefined && pooler === "none") {
    throw new ConfigError("DATABASE_DIRECT_URL is only used with DATABASE_POOLER=transaction; set that or unset it");
  }
  const pollMs = pooler === "transaction" && directUrl === undefined ? OUTBOX_POLL_MS_WITHOUT_LISTEN : OUTBOX_POLL_MS;
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
    // A few windows of the broker's Receive Maximum drain faster, more do not (bench/README.md,
    // "Several MQTT connections").
    relayMqttConnections: integer(env, "RELAY_MQTT_CONNECTIONS", 3, 1, 16),
    // Fewer claims cost less CPU per event, for at most this much more latency (bench/README.md,
    // "Relay beside the API"); past a second events would wait longer than a poll makes them.
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
    // One connection per concurrent request at the load bench/ drives: more concurrent commits
    // share more flushes (bench/README.md, "API latency and pool size").
    apiPoolSize: integer(env, "API_POOL_SIZE", 32, 1, MAX_API_POOL_SIZE),
    // Requests beyond these go several to a statement; more did not add charges and lengthened
    // the tail (bench/README.md, "Group commit").
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

// The relay's statements take milliseconds on a healthy database: its bounds trip only on a
// stalled one, or a claim queued for long behind DDL. Its grace lets a batch finish its publish
// timeout (10 s) and mark, inside the 30 s an orchestrator waits before SIGKILL.
function relayTimeBounds(env: Env): RelayTimeBounds {
  return Object.freeze({
    statementTimeoutMs: integer(env, "RELAY_STATEMENT_TIMEOUT_MS", 30_000, 1, HOUR_MS),
    lockTimeoutMs: integer(env, "RELAY_LOCK_TIMEOUT_MS", 10_000, 1, HOUR_MS),
    shutdownGraceMs: integer(env, "RELAY_SHUTDOWN_GRACE_MS", 20_000, 1, HOUR_MS),
  });
}

// Every API bound trips long before a client's own timeout (30 s and more), so it gets a 503,
// and far above what a healthy database takes; the request's is one pool wait plus one statement,
// with room for a resend.
function apiTimeBounds(env: Env): ApiTimeBounds {
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

function authConfig(env: Env): AuthConfig {
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

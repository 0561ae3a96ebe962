// Configuration: read from the environment once, validated, frozen. A bad value is a
// ConfigError naming the variable; the entrypoints print its message and exit 1.

import { ConfigError, databaseUrl, flag, host, integer, url, urlList, type Env } from "./config-values.ts";
import { apiTimeBounds, relayTimeBounds, type ApiTimeBounds, type RelayTimeBounds } from "./time-bounds.ts";
import { processorConfig, type ProcessorConfig } from "./config-processor.ts";
import { subscriberApiConfig, type SubscriberApiConfig } from "./config-subscriber.ts";
import { Secret } from "./redact.ts";
import { admissionConfig, type AdmissionConfig } from "./config-admission.ts";

export { ConfigError, databaseUrl, type Env } from "./config-values.ts";
export type { ApiTimeBounds, RelayTimeBounds } from "./time-bounds.ts";
export type { ProcessorConfig, ProcessorMode } from "./config-processor.ts";
export type { SubscriberApiConfig } from "./config-subscriber.ts";
export type { AdmissionConfig } from "./config-admission.ts";

/** MQTT_PROTOCOL_VERSION: one version only, or 5 falling back to 3.1.1 (lib/platform/mqtt-connect.ts). */
export type MqttProtocol = "5" | "3.1.1" | "auto";
const MQTT_PROTOCOLS: readonly MqttProtocol[] = ["5", "3.1.1", "auto"];

/** DATABASE_POOLER: what sits between the processes and Postgres (docs/operations.md, "Behind PgBouncer"). */
export type DatabasePooler = "none" | "transaction";
const DATABASE_POOLERS: readonly DatabasePooler[] = ["none", "transaction"];

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";
const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error", "silent"];

export interface Config {
  readonly databaseUrl: string;
  /** "transaction": DATABASE_URL is a pooler that may give each transaction another server connection. */
  readonly databasePooler: DatabasePooler;
  /** Postgres itself, past the pooler: for what needs a session of its own (LISTEN, session advisory locks). */
  readonly databaseDirectUrl: string | undefined;
  /** MQTT_URL: the broker, or brokers in the order they are tried (lib/platform/mqtt-brokers.ts). */
  readonly mqttUrls: readonly string[];
  readonly port: number;
  readonly relayPort: number;
  /** The address the relay's health/metrics listener binds to. */
  readonly relayHost: string;
  readonly relayTimeBounds: RelayTimeBounds;
  readonly idempotencyTtlSeconds: number;
  /** IDEMPOTENCY_TOMBSTONE_SECONDS: how long an expired key's tombstone answers 410 before the key is new again (0: deleted at expiry). */
  readonly idempotencyTombstoneSeconds: number;
  readonly outboxBatchSize: number;
  /** MQTT connections the relay publishes over, each with the broker's Receive Maximum in flight. */
  readonly relayMqttConnections: number;
  /** RELAY_GATHER_MS: on a stream past 1,000 events/s, how long the relay gathers events into one claim (0 = never). */
  readonly relayGatherMs: number;
  readonly outboxPollMs: number;
  readonly outboxRetentionSeconds: number;
  readonly subscriberInboxRetentionSeconds: number;
  /** How long the reference subscriber holds an event whose predecessor has not come before it processes it anyway. */
  readonly subscriberGapTimeoutMs: number;
  /** Where the reference subscriber asks for the events of a gap (config-subscriber.ts); undefined: it does not. */
  readonly subscriberApi: SubscriberApiConfig | undefined;
  readonly mqttTopicPrefix: string;
  readonly mqttProtocol: MqttProtocol;
  readonly logLevel: LogLevel;
  readonly otlpEndpoint: string | undefined;
  readonly apiTimeBounds: ApiTimeBounds;
  /** Connections in the API process's pool; N processes hold N times this many. */
  readonly apiPoolSize: number;
  /** Charge statements one API process runs at once; requests beyond them wait and go in batches. */
  readonly apiChargeStatements: number;
  /** Listen with SO_REUSEPORT, so several API processes can share PORT. */
  readonly apiReusePort: boolean;
  /** Count every request in http_server_request_duration_seconds (off only to measure its cost). */
  readonly apiHttpMetrics: boolean;
  readonly auth: AuthConfig;
  /** API_KEY_HASH_SECRET: the HMAC key of keyHash in every log line (redact.ts); unset, each process makes one. */
  readonly keyHashSecret: Secret | undefined;
  /** Rate limit per tenant, cap in flight, operator port. */
  readonly admission: AdmissionConfig;
  /** The payment processor (config-processor.ts). */
  readonly processor: ProcessorConfig;
}

export type AuthMode = "jwt" | "none";
const AUTH_MODES: readonly AuthMode[] = ["jwt", "none"];

/** How the API authenticates `/charges` requests; the API alone decides whether a key source is required. */
export interface AuthConfig {
  readonly mode: AuthMode;
  /** HS256 shared secret (at least MIN_JWT_SECRET_BYTES bytes). */
  readonly jwtSecret: string | undefined;
  /** The identity provider's JWKS (RS256, ES256, EdDSA keys). */
  readonly jwksUrl: string | undefined;
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
  /** The claim that names the tenant. */
  readonly tenantClaim: string;
  /** AUTH_TENANT_IDS: the characters a tenant id may hold (lib/api/auth.ts). */
  readonly tenantIds: TenantIds;
}

/** `ascii`: printable ASCII; `unicode`: letters, marks, digits, punctuation and symbols of any script. */
export type TenantIds = "ascii" | "unicode";
const TENANT_IDS: readonly TenantIds[] = ["ascii", "unicode"];

function topicPrefix(env: Env): string {
  const raw = env.MQTT_TOPIC_PREFIX ?? "";
  // MQTT forbids wildcards in a publish topic and NUL anywhere.
  if (/[#+\u0000]/.test(raw)) {
    throw new ConfigError(`MQTT_TOPIC_PREFIX must not contain '#', '+' or NUL, got "${raw}"`);
  }
  return raw;
}

// Connections: one per concurrent request at the load bench/ drives. Every charge is one
// statement ending in a commit flush, and more concurrent commits let group commit share the
// flushes (bench/README.md, "API latency and pool size").
const API_POOL_SIZE = 32;
// Statements one API process keeps running at once (lib/idempotency/group-commit.ts); the
// requests beyond them go together, several charges to a statement and a commit. More did not
// add charges and lengthened the tail (bench/README.md, "Group commit"); two keep one process
// near its own CPU limit even on a large database server.
const API_CHARGE_STATEMENTS = 2;
// A sanity bound: each connection is a Postgres backend process, and a pool this large is a typo.
const MAX_API_POOL_SIZE = 1000;

function logLevel(env: Env): LogLevel {
  const raw = (env.LOG_LEVEL ?? "info").trim().toLowerCase();
  const found = LOG_LEVELS.find((level) => level === raw);
  if (!found) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(", ")}, got "${raw}"`);
  return found;
}

const TEN_YEARS_S = 10 * 365 * 24 * 3600;
// An expired key answers 410 this long (30 days, as Stripe's v2 API keeps its keys): a client
// that retries a day late learns where its resource is instead of making a second one.
export const DEFAULT_TOMBSTONE_S = 30 * 86_400;
// Rows: the relay's largest claim. Claims start small and grow while the broker keeps up
// (lib/relay/lanes.ts), so this matters only on a backlog, where larger claims mean fewer
// transactions per row, up to where they drain no faster (bench/README.md, "Relay drain").
export const DEFAULT_OUTBOX_BATCH_SIZE = 2000;
const MAX_OUTBOX_BATCH_SIZE = 10_000;
// A broker bounds each connection's unacknowledged publishes (Mosquitto's max_inflight_messages,
// sent as the CONNACK's Receive Maximum, which MQTT 5 forbids a client to exceed), so one
// connection's drain waits on that window's round trips; a few windows drain faster, more do not
// (bench/README.md, "Several MQTT connections"). The events of one aggregate share a connection.
export const DEFAULT_RELAY_MQTT_CONNECTIONS = 3;
const MAX_RELAY_MQTT_CONNECTIONS = 16;
// Milliseconds: on a stream past 1,000 events/s the relay claims at most this often, each claim
// taking what came meanwhile (lib/relay/loop.ts): fewer claims cost less CPU per event, for at
// most this much more commit → subscriber time (bench/README.md, "Relay beside the API"). A
// second is the most: past it events wait longer than a poll would make them.
const DEFAULT_RELAY_GATHER_MS = 40;
const MAX_RELAY_GATHER_MS = 1000;
// The reference subscriber's inbox must remember an event longer than a redelivery can come:
// the broker keeps an unacknowledged event in the session up to its expiry (SESSION_EXPIRY_S in
// lib/subscriber/session.ts), and a relay that never saw the PUBACK publishes again when it is
// back. A week covers the session and days of relay outage; less than the session is refused.
const INBOX_RETENTION_S = 7 * 86_400;
const MIN_INBOX_RETENTION_S = 86_400;
// Milliseconds the reference subscriber holds an event that came ahead of its turn before it
// processes it anyway (lib/subscriber/process.ts). A member that crashed with the predecessor in
// its session gets it back once restarted, within a minute or two under a supervisor: five
// minutes covers that, and is the longest an aggregate waits for an event that will never come.
// At most a day, the MQTT session expiry: a predecessor still in a session comes no later.
export const DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS = 300_000;
const MAX_SUBSCRIBER_GAP_TIMEOUT_MS = 86_400_000;

function mqttProtocol(env: Env): MqttProtocol {
  const raw = (env.MQTT_PROTOCOL_VERSION ?? "").trim().toLowerCase() || "auto";
  const found = MQTT_PROTOCOLS.find((p) => p === raw);
  if (!found) throw new ConfigError(`MQTT_PROTOCOL_VERSION must be one of ${MQTT_PROTOCOLS.join(", ")}, got "${raw}"`);
  return found;
}

function databasePooler(env: Env): DatabasePooler {
  const raw = (env.DATABASE_POOLER ?? "").trim().toLowerCase() || "none";
  const found = DATABASE_POOLERS.find((p) => p === raw);
  if (!found) throw new ConfigError(`DATABASE_POOLER must be one of ${DATABASE_POOLERS.join(", ")}, got "${raw}"`);
  return found;
}

function databaseDirectUrl(env: Env, pooler: DatabasePooler): string | undefined {
  // Checked as DATABASE_URL is: one host or a list (database-url.ts).
  const direct = databaseUrl(env, "DATABASE_DIRECT_URL", "") || undefined;
  // Without a pooler every connection is direct: a second URL would only be a second thing to keep right.
  if (direct !== undefined && pooler === "none") {
    throw new ConfigError("DATABASE_DIRECT_URL is only used with DATABASE_POOLER=transaction; set that or unset it");
  }
  return direct;
}

// The relay's idle fallback poll: a NOTIFY wakes it as soon as a charge commits.
const OUTBOX_POLL_MS = 1000;
// Behind a transaction pooler without DATABASE_DIRECT_URL the relay cannot LISTEN: its poll is
// the only wake-up, so it is short, at the cost of idle claims of an empty pending index
// (docs/operations.md, "Behind PgBouncer").
const OUTBOX_POLL_MS_WITHOUT_LISTEN = 100;

export function loadConfig(env: Env): Config {
  const pooler = databasePooler(env);
  const directUrl = databaseDirectUrl(env, pooler);
  const pollMs = pooler === "transaction" && directUrl === undefined ? OUTBOX_POLL_MS_WITHOUT_LISTEN : OUTBOX_POLL_MS;
  const gapTimeoutMs = integer(env, "SUBSCRIBER_GAP_TIMEOUT_MS", DEFAULT_SUBSCRIBER_GAP_TIMEOUT_MS, 1, MAX_SUBSCRIBER_GAP_TIMEOUT_MS);
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
    idempotencyTombstoneSeconds: integer(env, "IDEMPOTENCY_TOMBSTONE_SECONDS", DEFAULT_TOMBSTONE_S, 0, TEN_YEARS_S),
    outboxBatchSize: integer(env, "OUTBOX_BATCH_SIZE", DEFAULT_OUTBOX_BATCH_SIZE, 1, MAX_OUTBOX_BATCH_SIZE),
    outboxPollMs: integer(env, "OUTBOX_POLL_MS", pollMs, 1, 3_600_000),
    relayMqttConnections: integer(env, "RELAY_MQTT_CONNECTIONS", DEFAULT_RELAY_MQTT_CONNECTIONS, 1, MAX_RELAY_MQTT_CONNECTIONS),
    relayGatherMs: integer(env, "RELAY_GATHER_MS", DEFAULT_RELAY_GATHER_MS, 0, MAX_RELAY_GATHER_MS),
    outboxRetentionSeconds: integer(env, "OUTBOX_RETENTION_SECONDS", 7 * 86_400, 1, TEN_YEARS_S),
    subscriberInboxRetentionSeconds: integer(env, "SUBSCRIBER_INBOX_RETENTION_SECONDS", INBOX_RETENTION_S, MIN_INBOX_RETENTION_S, TEN_YEARS_S),
    subscriberGapTimeoutMs: gapTimeoutMs,
    subscriberApi: subscriberApiConfig(env, gapTimeoutMs),
    mqttTopicPrefix: topicPrefix(env),
    mqttProtocol: mqttProtocol(env),
    logLevel: logLevel(env),
    otlpEndpoint: env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || undefined,
    apiTimeBounds: apiTimeBounds(env),
    apiPoolSize: integer(env, "API_POOL_SIZE", API_POOL_SIZE, 1, MAX_API_POOL_SIZE),
    apiChargeStatements: integer(env, "API_CHARGE_STATEMENTS", API_CHARGE_STATEMENTS, 1, MAX_API_POOL_SIZE),
    apiReusePort: flag(env, "API_REUSE_PORT"),
    apiHttpMetrics: flag(env, "API_HTTP_METRICS", true),
    auth: authConfig(env),
    keyHashSecret: keyHashSecret(env),
    admission: admissionConfig(env),
    processor: processorConfig(env),
  });
}

// RFC 7518 §3.2: an HS256 key must be at least as long as the hash output (256 bits); a
// shorter secret can be brute-forced from one token.
export const MIN_JWT_SECRET_BYTES = 32;

// As for AUTH_JWT_SECRET: an HMAC key shorter than the hash's output is the weak point.
export const MIN_KEY_HASH_SECRET_BYTES = 32;

function keyHashSecret(env: Env): Secret | undefined {
  const raw = env.API_KEY_HASH_SECRET || undefined;
  if (raw === undefined) return undefined;
  // The secret itself is never echoed, only its length.
  const bytes = new TextEncoder().encode(raw).byteLength;
  if (bytes < MIN_KEY_HASH_SECRET_BYTES) throw new ConfigError(`API_KEY_HASH_SECRET must be at least ${MIN_KEY_HASH_SECRET_BYTES} bytes, got ${bytes}`);
  return new Secret(raw);
}

function authConfig(env: Env): AuthConfig {
  const rawMode = (env.AUTH_MODE ?? "").trim().toLowerCase() || "jwt";
  const mode = AUTH_MODES.find((m) => m === rawMode);
  if (!mode) throw new ConfigError(`AUTH_MODE must be one of ${AUTH_MODES.join(", ")}, got "${rawMode}"`);
  const jwtSecret = env.AUTH_JWT_SECRET || undefined;
  // The secret itself is never echoed, only its length.
  if (jwtSecret !== undefined && new TextEncoder().encode(jwtSecret).byteLength < MIN_JWT_SECRET_BYTES) {
    throw new ConfigError(`AUTH_JWT_SECRET must be at least ${MIN_JWT_SECRET_BYTES} bytes, got ${new TextEncoder().encode(jwtSecret).byteLength}`);
  }
  const jwksRaw = env.AUTH_JWKS_URL?.trim();
  const tenantClaim = env.AUTH_TENANT_CLAIM?.trim() || "sub";
  const rawIds = (env.AUTH_TENANT_IDS ?? "").trim().toLowerCase() || "ascii";
  const tenantIds = TENANT_IDS.find((ids) => ids === rawIds);
  if (!tenantIds) throw new ConfigError(`AUTH_TENANT_IDS must be one of ${TENANT_IDS.join(", ")}, got "${rawIds}"`);
  return Object.freeze({
    mode,
    jwtSecret,
    jwksUrl: jwksRaw ? url(env, "AUTH_JWKS_URL", "", ["https:", "http:"]) : undefined,
    issuer: env.AUTH_ISSUER?.trim() || undefined,
    audience: env.AUTH_AUDIENCE?.trim() || undefined,
    tenantClaim,
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

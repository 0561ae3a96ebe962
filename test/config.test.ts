// Configuration: defaults, validation, and the one clear line a bad value gives at start.
import { expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../lib/platform/config.ts";
import { runToExit } from "../testkit/processes.ts";
import { authEnv } from "../testkit/auth.ts";

test("defaults are the README's (Configuration)", () => {
  const config = loadConfig({});
  expect(config).toMatchObject({
    databaseUrl: "postgres://localhost:5432/postgres",
    mqttUrls: ["mqtt://localhost:1883"],
    port: 3000,
    relayPort: 9465,
    idempotencyTtlSeconds: 86_400,
    outboxBatchSize: 2000,
    outboxPollMs: 1000,
    relayMqttConnections: 3,
    relayGatherMs: 40,
    outboxRetentionSeconds: 604_800,
    mqttTopicPrefix: "",
    mqttProtocol: "auto",
    logLevel: "info",
  });
  expect(Object.isFrozen(config)).toBe(true);
});

test("admission: 10,000 requests a second per tenant with a burst of one second, 1,000 in flight and half of them per tenant, 5 s for a body, /metrics a second old at most, no operator port, by default; frozen", () => {
  const admission = loadConfig({}).admission;
  expect(admission).toEqual({
    rateLimitPerS: 10_000,
    rateBurst: 10_000,
    maxInFlight: 1000,
    maxInFlightPerTenant: 500,
    maxInFlightPerKey: 8,
    bodyTimeoutMs: 5000,
    metricsMaxAgeMs: 1000,
    refusalHoldMs: 250,
    operatorPort: undefined,
    operatorHost: "127.0.0.1",
  });
  expect(Object.isFrozen(admission)).toBe(true);
  // The burst follows the rate unless set; 0 turns the limit off.
  expect(loadConfig({ API_RATE_LIMIT: "50" }).admission).toMatchObject({ rateLimitPerS: 50, rateBurst: 50 });
  expect(loadConfig({ API_RATE_LIMIT: "0" }).admission).toMatchObject({ rateLimitPerS: 0, rateBurst: 1 });
  expect(loadConfig({ API_RATE_LIMIT: "50", API_RATE_BURST: "200" }).admission).toMatchObject({ rateBurst: 200 });
  expect(loadConfig({ API_RATE_LIMIT_HOLD_MS: "0" }).admission).toMatchObject({ refusalHoldMs: 0 });
  expect(loadConfig({ OPERATOR_PORT: "9464", OPERATOR_HOST: "0.0.0.0" }).admission).toMatchObject({ operatorPort: 9464, operatorHost: "0.0.0.0" });
  // A tenant's share follows the cap unless set (half, rounded up: one place of one); up to all of it.
  expect(loadConfig({ API_MAX_IN_FLIGHT: "1" }).admission).toMatchObject({ maxInFlight: 1, maxInFlightPerTenant: 1 });
  expect(loadConfig({ API_MAX_IN_FLIGHT: "7" }).admission).toMatchObject({ maxInFlightPerTenant: 4 });
  expect(loadConfig({ API_MAX_IN_FLIGHT: "100", API_MAX_IN_FLIGHT_PER_TENANT: "100" }).admission).toMatchObject({ maxInFlightPerTenant: 100 });
  expect(loadConfig({ API_BODY_TIMEOUT_MS: "100", API_METRICS_MAX_AGE_MS: "0" }).admission).toMatchObject({ bodyTimeoutMs: 100, metricsMaxAgeMs: 0 });
});

test("RELAY_GATHER_MS: 0 turns gathering off; up to a second", () => {
  expect(loadConfig({ RELAY_GATHER_MS: "0" }).relayGatherMs).toBe(0);
  expect(loadConfig({ RELAY_GATHER_MS: "1000" }).relayGatherMs).toBe(1000);
});

test("MQTT_PROTOCOL_VERSION: auto by default; 5 and 3.1.1 taken as they are", () => {
  expect(loadConfig({ MQTT_PROTOCOL_VERSION: "5" }).mqttProtocol).toBe("5");
  expect(loadConfig({ MQTT_PROTOCOL_VERSION: " 3.1.1 " }).mqttProtocol).toBe("3.1.1");
  expect(loadConfig({ MQTT_PROTOCOL_VERSION: "AUTO" }).mqttProtocol).toBe("auto");
});

test("auth defaults: jwt mode, the tenant in sub, no key source (the API refuses to start without one)", () => {
  expect(loadConfig({}).auth).toEqual({ mode: "jwt", jwtSecret: undefined, jwksUrl: undefined, issuer: undefined, audience: undefined, tenantClaim: "sub", tenantIds: "ascii" });
  expect(loadConfig({ AUTH_TENANT_IDS: " Unicode " }).auth.tenantIds).toBe("unicode");
  const set = loadConfig({ AUTH_MODE: "NONE", AUTH_TENANT_CLAIM: "org_id", AUTH_ISSUER: "https://idp/", AUTH_AUDIENCE: "charges", AUTH_JWKS_URL: "https://idp/jwks.json" }).auth;
  expect(set).toMatchObject({ mode: "none", tenantClaim: "org_id", issuer: "https://idp/", audience: "charges", jwksUrl: "https://idp/jwks.json" });
});

test("API pool size 32 and no SO_REUSEPORT by default; both settable for running several APIs on one port", () => {
  expect(loadConfig({})).toMatchObject({ apiPoolSize: 32, apiReusePort: false });
  expect(loadConfig({ API_POOL_SIZE: "16", API_REUSE_PORT: "1" })).toMatchObject({ apiPoolSize: 16, apiReusePort: true });
  expect(loadConfig({ API_REUSE_PORT: "false" }).apiReusePort).toBe(false);
});

test("DATABASE_POOLER: none by default, no direct URL; transaction takes DATABASE_DIRECT_URL", () => {
  expect(loadConfig({})).toMatchObject({ databasePooler: "none", databaseDirectUrl: undefined });
  const pooled = loadConfig({ DATABASE_POOLER: " Transaction ", DATABASE_DIRECT_URL: "postgres://db:5432/app" });
  expect(pooled).toMatchObject({ databasePooler: "transaction", databaseDirectUrl: "postgres://db:5432/app" });
});

test.each([
  [{ DATABASE_POOLER: "session" }, "DATABASE_POOLER"],
  [{ DATABASE_POOLER: "transaction", DATABASE_DIRECT_URL: "not a url" }, "DATABASE_DIRECT_URL"],
  [{ DATABASE_POOLER: "transaction", DATABASE_DIRECT_URL: "mysql://db/app" }, "DATABASE_DIRECT_URL"],
  // Without a pooler every connection is direct already.
  [{ DATABASE_DIRECT_URL: "postgres://db:5432/app" }, "DATABASE_DIRECT_URL"],
])("%p is refused with a message naming %s", (env, name) => {
  expect(() => loadConfig(env)).toThrow(ConfigError);
  expect(() => loadConfig(env)).toThrow(name);
});

test("OUTBOX_POLL_MS: 100 ms behind a pooler without DATABASE_DIRECT_URL (the poll is the relay's only wake-up), else 1000; a value set wins", () => {
  expect(loadConfig({ DATABASE_POOLER: "transaction" }).outboxPollMs).toBe(100);
  expect(loadConfig({ DATABASE_POOLER: "transaction", DATABASE_DIRECT_URL: "postgres://db/app" }).outboxPollMs).toBe(1000);
  expect(loadConfig({ DATABASE_POOLER: "transaction", OUTBOX_POLL_MS: "250" }).outboxPollMs).toBe(250);
});

test("2 charge statements at once per API by default (group commit beyond them), settable", () => {
  expect(loadConfig({}).apiChargeStatements).toBe(2);
  expect(loadConfig({ API_CHARGE_STATEMENTS: "32" }).apiChargeStatements).toBe(32);
});

test.each([
  ["PORT", "abc"],
  ["PORT", "70000"],
  ["RELAY_PORT", "-1"],
  ["IDEMPOTENCY_TTL_SECONDS", "0"],
  ["IDEMPOTENCY_TTL_SECONDS", "1.5"],
  ["OUTBOX_BATCH_SIZE", "0"],
  ["OUTBOX_POLL_MS", "soon"],
  ["RELAY_MQTT_CONNECTIONS", "0"],
  ["API_CHARGE_STATEMENTS", "0"],
  ["RELAY_MQTT_CONNECTIONS", "17"],
  ["RELAY_GATHER_MS", "-1"],
  ["RELAY_GATHER_MS", "1001"],
  ["OUTBOX_RETENTION_SECONDS", "1e3"],
  ["DATABASE_URL", "not a url"],
  ["DATABASE_URL", "mysql://localhost/x"],
  ["MQTT_URL", "http://localhost:1883"],
  ["MQTT_TOPIC_PREFIX", "a/#/"],
  ["MQTT_PROTOCOL_VERSION", "4"],
  ["LOG_LEVEL", "loud"],
  ["AUTH_MODE", "basic"],
  ["AUTH_JWT_SECRET", "x".repeat(31)],
  ["API_KEY_HASH_SECRET", "x".repeat(31)],
  ["AUTH_JWKS_URL", "file:///etc/jwks.json"],
  ["API_POOL_SIZE", "0"],
  ["API_REUSE_PORT", "yes"],
  ["API_STATEMENT_TIMEOUT_MS", "0"],
  ["API_STATEMENT_TIMEOUT_MS", "5s"],
  ["API_LOCK_TIMEOUT_MS", "1.5"],
  ["API_LOCK_TIMEOUT_MS", "-1"],
  ["API_POOL_WAIT_MS", "soon"],
  ["API_POOL_WAIT_MS", "99999999999"],
  ["API_REQUEST_TIMEOUT_MS", "0"],
  // Less than one pool wait plus one statement (2 s + 5 s by default).
  ["API_REQUEST_TIMEOUT_MS", "6999"],
  ["API_RATE_LIMIT", "-1"],
  ["API_RATE_LIMIT", "10/s"],
  ["API_RATE_BURST", "0"],
  ["API_MAX_IN_FLIGHT", "0"],
  ["API_MAX_IN_FLIGHT_PER_TENANT", "0"],
  // More than the process's cap (1,000 by default).
  ["API_MAX_IN_FLIGHT_PER_TENANT", "1001"],
  ["API_MAX_IN_FLIGHT_PER_KEY", "0"],
  ["API_BODY_TIMEOUT_MS", "99"],
  ["API_BODY_TIMEOUT_MS", "60001"],
  ["API_METRICS_MAX_AGE_MS", "-1"],
  ["API_METRICS_MAX_AGE_MS", "60001"],
  ["AUTH_TENANT_IDS", "latin1"],
  // Longer than the smallest Retry-After it announces.
  ["API_RATE_LIMIT_HOLD_MS", "1001"],
  ["API_RATE_LIMIT_HOLD_MS", "-1"],
  ["OPERATOR_PORT", "70000"],
  ["OPERATOR_PORT", "3000"],
  ["OPERATOR_HOST", "a host"],
])("%s=%p is refused with a message naming it", (name, value) => {
  let error: unknown;
  try {
    loadConfig({ [name]: value });
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(ConfigError);
  expect((error as Error).message).toContain(name);
});

test.each([
  ["postgres://app@db-a:5432,db-b:5433/charges?target_session_attrs=read-write"],
  ["postgresql://app@db-a,db-b/charges?target_session_attrs=primary&application_name=x"],
  ["postgres://app@db-a:5432,db-b:5432/charges"],
  ["postgres://app@db-a/charges?target_session_attrs=any"],
  ["postgres://app@[::1]:5432/charges"],
  ["postgres://app@my_db:5432/charges"],
  ["postgres:///charges"],
])("DATABASE_URL=%p (libpq's forms, one host or a list) is taken as it is", (value) => {
  expect(loadConfig({ DATABASE_URL: value }).databaseUrl).toBe(value);
});

test.each([
  ["postgres://app@db-a,,db-b/charges", "entry 2 is empty"],
  ["postgres://app@db-a,/charges", "entry 2 is empty"],
  ["postgres://app@db-a:5432,db-b:99999/charges", "entry 2 has a port that is not an integer"],
  ["postgres://app@db-a:5432,db-b:x/charges", "entry 2 has a port that is not an integer"],
  ["postgres://app@db-a,db b/charges", "entry 2 is not a host name"],
  ["postgres://app@[::1]:5432,db-b/charges", "entry 1 is an IPv6 address"],
  ["postgres://app@db-a,db-b/charges?target_session_attrs=standby", "target_session_attrs=standby, which allows a standby"],
  ["postgres://app@db-a,db-b/charges?target_session_attrs=prefer-standby", "target_session_attrs=prefer-standby, which allows a standby"],
  ["postgres://app@db-a,db-b/charges?target_session_attrs=read-only", "target_session_attrs=read-only, which allows a standby"],
  ["postgres://app@db-a,db-b/charges?target_session_attrs=master", "target_session_attrs=master; accepted: read-write, primary, any"],
  ["postgres://app@db-a,db-b/charges?target_session_attrs=READ-WRITE", "accepted: read-write, primary, any"],
  ["postgres://app@db-a/charges?target_session_attrs=primary&target_session_attrs=any", "names target_session_attrs 2 times"],
])("DATABASE_URL=%p is refused: %p", (value, why) => {
  let error: unknown;
  try {
    loadConfig({ DATABASE_URL: value });
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(ConfigError);
  expect((error as Error).message).toStartWith("DATABASE_URL ");
  expect((error as Error).message).toContain(why);
});

test.each([
  ["mqtt://a:1883", ["mqtt://a:1883"]],
  [" mqtt://a:1883 ", ["mqtt://a:1883"]],
  ["mqtt://a:1883,mqtt://b:1884,mqtt://c:1885", ["mqtt://a:1883", "mqtt://b:1884", "mqtt://c:1885"]],
  ["mqtt://a:1883, mqtts://u:p@b:8883 ,wss://c/mqtt", ["mqtt://a:1883", "mqtts://u:p@b:8883", "wss://c/mqtt"]],
])("MQTT_URL=%p: the brokers in the order given", (value, urls) => {
  const config = loadConfig({ MQTT_URL: value });
  expect(config.mqttUrls).toEqual(urls);
  expect(Object.isFrozen(config.mqttUrls)).toBe(true);
});

test.each([
  ["mqtt://a:1883,,mqtt://c:1885", "MQTT_URL entry 2 of 3 is empty"],
  ["mqtt://a:1883,", "MQTT_URL entry 2 of 2 is empty"],
  ["mqtt://a:1883,http://b:1884", 'MQTT_URL entry 2 must use mqtt: or mqtts: or tcp: or ws: or wss:, got "http:"'],
  ["mqtt://a:1883,b:1884", 'MQTT_URL entry 2 must use'],
  ["mqtt://a:1883,not a url", 'MQTT_URL entry 2 is not a URL: "not a url"'],
  ["mqtt://a:1883,mqtt://b:1884,mqtt://a:1883", 'MQTT_URL entry 3 repeats entry 1: "mqtt://a:1883"'],
  // One URL is refused in the words it always was.
  ["http://a:1883", 'MQTT_URL must use mqtt: or mqtts: or tcp: or ws: or wss:, got "http:"'],
])("MQTT_URL=%p is refused: %p", (value, why) => {
  expect(() => loadConfig({ MQTT_URL: value })).toThrow(ConfigError);
  expect(() => loadConfig({ MQTT_URL: value })).toThrow(why);
});

/** Runs an entrypoint to its exit; returns its exit code and stderr lines. */
async function runEntry(entry: string, env: Record<string, string>): Promise<{ code: number; lines: string[] }> {
  const { code, stderr } = await runToExit(["bun", entry], env);
  return { code, lines: stderr.trim().split("\n") };
}

test("API_KEY_HASH_SECRET: unset by default; a secret of 32 bytes is kept and never prints itself", () => {
  expect(loadConfig({}).keyHashSecret).toBeUndefined();
  const secret = "k".repeat(32);
  const config = loadConfig({ API_KEY_HASH_SECRET: secret });
  expect(config.keyHashSecret?.reveal()).toBe(secret);
  expect(JSON.stringify(config)).not.toContain(secret);
  expect(String(config.keyHashSecret)).toBe("***");
});

test.each([["api.ts"], ["relay.ts"], ["ops.ts"]])("bun %s with a short API_KEY_HASH_SECRET: exit 1, its length named, the secret never echoed", async (entry) => {
  const secret = "hash-secret-too-short";
  const { code, stderr, stdout } = await runToExit(["bun", entry, "stale-keys"], { ...authEnv(), API_KEY_HASH_SECRET: secret });
  expect(code).toBe(1);
  expect(stderr.trim()).toBe(`configuration error: API_KEY_HASH_SECRET must be at least 32 bytes, got ${secret.length}`);
  expect(stdout + stderr).not.toContain(secret);
});

test.each([["api.ts"], ["relay.ts"]])("bun %s with a bad value: one line on stderr, exit 1", async (entry) => {
  const { code, lines } = await runEntry(entry, { PORT: "nope", RELAY_PORT: "nope" });
  expect(code).toBe(1);
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^configuration error: (PORT|RELAY_PORT) must be an integer/);
});

test.each([["api.ts"], ["relay.ts"]])("bun %s with an unreachable database: one line on stderr, exit 1", async (entry) => {
  const { code, lines } = await runEntry(entry, { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none", PORT: "0", RELAY_PORT: "0", ...authEnv() });
  expect(code).toBe(1);
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain("DATABASE_URL");
});

test("bun api.ts with a host list none of whose servers is up: one line on stderr once the first contact's bound (30 s) ran out, exit 1", async () => {
  const { code, lines } = await runEntry("api.ts", { DATABASE_URL: "postgres://postgres@127.0.0.1:1,127.0.0.1:2/none", PORT: "0", ...authEnv() });
  expect(code).toBe(1);
  expect(lines).toEqual(["api: cannot reach or migrate the database at DATABASE_URL: none of its hosts took a connection within 30 s"]);
}, 90_000);

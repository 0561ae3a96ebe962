// The API's admission control (docs/configuration.md, "Admission control"): a token bucket per
// tenant, caps on requests in flight, the body timeout, /metrics' render age, the operator port.
import { ConfigError, host, integer, type Env } from "./config-values.ts";

export type AdmissionConfig = ReturnType<typeof admissionConfig>;

const MAX_RATE_LIMIT_PER_S = 1_000_000;
const MAX_IN_FLIGHT = 1_000_000;

export function admissionConfig(env: Env) {
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

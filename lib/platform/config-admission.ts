// The API's admission control (docs/configuration.md, "Admission control"): a token bucket per
// tenant, a cap on requests in flight and each tenant's share of it, the time a body has to
// arrive, /metrics' render interval, and the optional operator port.
import { ConfigError, host, integer, type Env } from "./config-values.ts";

export interface AdmissionConfig {
  /** API_RATE_LIMIT: requests a second one tenant may make to one API process; 0 = no limit. */
  readonly rateLimitPerS: number;
  /** API_RATE_BURST: the bucket's size, what a tenant may send at once after a quiet spell. */
  readonly rateBurst: number;
  /** API_MAX_IN_FLIGHT: /charges requests one process serves at once; past it, 503 at once. */
  readonly maxInFlight: number;
  /** API_MAX_IN_FLIGHT_PER_TENANT: of those, what one tenant may hold; past it, 503 at once. */
  readonly maxInFlightPerTenant: number;
  /** API_MAX_IN_FLIGHT_PER_KEY: of those, what the POSTs of one tenant's Idempotency-Key may hold; past it, 409 at once. */
  readonly maxInFlightPerKey: number;
  /** API_BODY_TIMEOUT_MS: from its arrival, how long a request's body has to arrive in full; past it, 408. */
  readonly bodyTimeoutMs: number;
  /** API_METRICS_MAX_AGE_MS: how old the /metrics text may be; every scrape within it gets one render. */
  readonly metricsMaxAgeMs: number;
  /** API_RATE_LIMIT_HOLD_MS: how long a 429 is held before it is sent; 0 = at once. */
  readonly refusalHoldMs: number;
  /** OPERATOR_PORT: /healthz, /readyz, /metrics, /openapi.json and /docs on a port of their own. */
  readonly operatorPort: number | undefined;
  readonly operatorHost: string;
}

// Requests a second: above what one tenant can make one process serve (bench/README.md), so by
// default nothing a process can serve is refused, and a deployment sets its tenants' contract.
export const DEFAULT_RATE_LIMIT_PER_S = 10_000;
const MAX_RATE_LIMIT_PER_S = 1_000_000;
// Requests: far beyond the default pool and the load bench/ and chaos/ drive, and each waiting
// request is at most a 16 KiB body and a promise, so these are a few MiB, not an unbounded queue.
export const DEFAULT_MAX_IN_FLIGHT = 1000;
const MAX_IN_FLIGHT = 1_000_000;
// Half the places by default: one tenant holding its whole share (bodies that never come, waits
// on its own key in flight) leaves the other half to everyone else, and a single-tenant
// deployment still has more at once than bench/ drives in processor mode.
const DEFAULT_TENANT_SHARE = 0.5;
// Requests of one key run one after another (they never share a statement): hundreds of them,
// say Prefer: wait on a key in flight, would queue every other tenant's charges behind theirs.
// A few cover a client's honest retries and waits; past them the key is in flight anyway, and
// the answer is the 409 it would get.
export const DEFAULT_MAX_IN_FLIGHT_PER_KEY = 8;
// Milliseconds. A charge body is tens of bytes and arrives with its headers; this is a slow
// mobile link's worst for 16 KiB, and ends a stalled body's place well before Bun's own idle
// timeout (10 s) closes the socket without an answer.
export const DEFAULT_BODY_TIMEOUT_MS = 5000;
const MIN_BODY_TIMEOUT_MS = 100;
const MAX_BODY_TIMEOUT_MS = 60_000;
// Milliseconds. A scraper polls every 15-60 s: a second-old text costs it nothing, and a flood of scrapes
// costs one render a second however many connections send it.
export const DEFAULT_METRICS_MAX_AGE_MS = 1000;
const MAX_METRICS_MAX_AGE_MS = 60_000;
// Milliseconds a 429 is held before it is sent: a client that waits its Retry-After (at least a
// second) loses nothing, and one that never waits makes a few refused requests a second per
// connection, not thousands, so its refusals cannot take the CPU the other tenants' requests
// need (bench/README.md, "a tenant at its limit").
export const DEFAULT_REFUSAL_HOLD_MS = 250;
// Under the smallest Retry-After: a held refusal never outlasts the wait it announces.
const MAX_REFUSAL_HOLD_MS = 1000;

export function admissionConfig(env: Env): AdmissionConfig {
  const rateLimitPerS = integer(env, "API_RATE_LIMIT", DEFAULT_RATE_LIMIT_PER_S, 0, MAX_RATE_LIMIT_PER_S);
  // One second's worth by default: a tenant at its rate never waits, a burst of a second passes.
  const rateBurst = integer(env, "API_RATE_BURST", Math.max(1, rateLimitPerS), 1, MAX_RATE_LIMIT_PER_S);
  const rawOperator = env.OPERATOR_PORT?.trim();
  const operatorPort = rawOperator ? integer(env, "OPERATOR_PORT", 0, 1, 65535) : undefined;
  const port = integer(env, "PORT", 3000, 0, 65535);
  if (operatorPort !== undefined && operatorPort === port) {
    throw new ConfigError(`OPERATOR_PORT must differ from PORT, both are ${port}`);
  }
  const maxInFlight = integer(env, "API_MAX_IN_FLIGHT", DEFAULT_MAX_IN_FLIGHT, 1, MAX_IN_FLIGHT);
  return Object.freeze({
    rateLimitPerS,
    rateBurst,
    maxInFlight,
    maxInFlightPerTenant: integer(env, "API_MAX_IN_FLIGHT_PER_TENANT", Math.ceil(maxInFlight * DEFAULT_TENANT_SHARE), 1, maxInFlight),
    maxInFlightPerKey: integer(env, "API_MAX_IN_FLIGHT_PER_KEY", DEFAULT_MAX_IN_FLIGHT_PER_KEY, 1, MAX_IN_FLIGHT),
    bodyTimeoutMs: integer(env, "API_BODY_TIMEOUT_MS", DEFAULT_BODY_TIMEOUT_MS, MIN_BODY_TIMEOUT_MS, MAX_BODY_TIMEOUT_MS),
    metricsMaxAgeMs: integer(env, "API_METRICS_MAX_AGE_MS", DEFAULT_METRICS_MAX_AGE_MS, 0, MAX_METRICS_MAX_AGE_MS),
    refusalHoldMs: integer(env, "API_RATE_LIMIT_HOLD_MS", DEFAULT_REFUSAL_HOLD_MS, 0, MAX_REFUSAL_HOLD_MS),
    operatorPort,
    // Loopback by default: the operator's endpoints are not the public's.
    operatorHost: host(env, "OPERATOR_HOST", "127.0.0.1"),
  });
}

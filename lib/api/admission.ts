// Admission control for the /charges routes, per process: a token bucket per tenant (429 past
// it), a cap on requests in flight and each tenant's share of it (503 past them), answered at
// once with Retry-After before the body is read or the database touched. A place is held from
// the token's check to the answer: while the body arrives and while it waits on Prefer: wait.
import type { AdmissionConfig } from "../platform/config.ts";

const MS_PER_S = 1000;
// Refusals held at once at most (API_RATE_LIMIT_HOLD_MS); past it, the next is sent at once. A
// held refusal is a timer and an open socket, not a request in flight (it is counted out of
// API_MAX_IN_FLIGHT first): this bounds what a client with many connections can park here.
const MAX_HELD_REFUSALS = 4096;
// Answers of /metrics, /openapi.json and /docs a second, for the whole process: far above a few
// scrapers and operators reading the docs (a page load is four requests). Past it each answer
// is held OPERATOR_HOLD_MS first, so a client that fetches them over many connections as fast
// as they come gets about one per connection per hold, and cannot take the event loop from
// the requests being served.
export const OPERATOR_RATE_PER_S = 100;
export const OPERATOR_HOLD_MS = 250;
// Tenants whose bucket is remembered at most; past it, the full (idle) buckets are dropped: a
// full bucket is what a tenant that was never seen gets anyway.
const MAX_BUCKETS = 100_000;

interface Bucket {
  tokens: number;
  at: number;
}

export type Admitted = { readonly ok: true } | { readonly ok: false; readonly retryAfterS: number };

export interface Admission {
  /** Takes one token of `tenant`'s bucket, or says how long until one is there. */
  take(tenant: string): Admitted;
  /**
   * Resolves once a refusal may be sent: after API_RATE_LIMIT_HOLD_MS, or at once when that is
   * 0 or MAX_HELD_REFUSALS are already held.
   */
  holdRefusal(): Promise<void>;
  readonly held: number;
  /** Counts a request in; false when API_MAX_IN_FLIGHT are already in (nothing counted then). */
  enter(): boolean;
  leave(): void;
  readonly inFlight: number;
  /** Counts a request of `tenant` in; false when it already holds API_MAX_IN_FLIGHT_PER_TENANT (nothing counted then). */
  enterTenant(tenant: string): boolean;
  leaveTenant(tenant: string): void;
  inFlightOf(tenant: string): number;
  /** Counts a request of one tenant's key in; false when API_MAX_IN_FLIGHT_PER_KEY of it are already in. */
  enterKey(scope: string): boolean;
  leaveKey(scope: string): void;
  /**
   * Resolves once an answer of /metrics, /openapi.json or /docs may be sent: at once within
   * OPERATOR_RATE_PER_S, else after OPERATOR_HOLD_MS (at once past MAX_HELD_REFUSALS held).
   */
  paceOperator(): Promise<void>;
  readonly bodyTimeoutMs: number;
}

const ADMITTED: Admitted = { ok: true };
const RELEASED: Promise<void> = Promise.resolve();

export function createAdmission(config: AdmissionConfig, now: () => number = performance.now.bind(performance)): Admission {
  const buckets = new Map<string, Bucket>();
  const rate = config.rateLimitPerS / MS_PER_S; // tokens per ms
  const burst = config.rateBurst;
  let inFlight = 0;
  // Only tenants and keys with a request in flight: at most API_MAX_IN_FLIGHT entries each.
  const byTenant = createHoldings(config.maxInFlightPerTenant);
  const byKey = createHoldings(config.maxInFlightPerKey);
  const holds = createHolds();
  const paceOperator = operatorPace(holds, now);
  const sweep = (at: number) => {
    for (const [tenant, bucket] of buckets) if (bucket.tokens + (at - bucket.at) * rate >= burst) buckets.delete(tenant);
  };
  return {
    take(tenant) {
      if (rate === 0) return ADMITTED;
      const at = now();
      let bucket = buckets.get(tenant);
      if (bucket === undefined) {
        if (buckets.size >= MAX_BUCKETS) sweep(at);
        bucket = { tokens: burst, at };
        buckets.set(tenant, bucket);
      } else {
        bucket.tokens = Math.min(burst, bucket.tokens + (at - bucket.at) * rate);
        bucket.at = at;
      }
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return ADMITTED;
      }
      // Whole seconds (RFC 9110 §10.2.3), at least one.
      return { ok: false, retryAfterS: Math.max(1, Math.ceil((1 - bucket.tokens) / rate / MS_PER_S)) };
    },
    holdRefusal() {
      return holds.hold(config.refusalHoldMs);
    },
    paceOperator,
    enter() {
      if (inFlight >= config.maxInFlight) return false;
      inFlight++;
      return true;
    },
    leave() {
      inFlight--;
    },
    get inFlight() {
      return inFlight;
    },
    enterTenant: byTenant.enter,
    leaveTenant: byTenant.leave,
    inFlightOf: byTenant.of,
    enterKey: byKey.enter,
    leaveKey: byKey.leave,
    bodyTimeoutMs: config.bodyTimeoutMs,
    get held() {
      return holds.held;
    },
  };
}

/** The operator routes' bucket: OPERATOR_RATE_PER_S answers at once, the rest held OPERATOR_HOLD_MS. */
function operatorPace(holds: ReturnType<typeof createHolds>, now: () => number): () => Promise<void> {
  const bucket: Bucket = { tokens: OPERATOR_RATE_PER_S, at: now() };
  const perMs = OPERATOR_RATE_PER_S / MS_PER_S;
  return () => {
    const at = now();
    bucket.tokens = Math.min(OPERATOR_RATE_PER_S, bucket.tokens + (at - bucket.at) * perMs);
    bucket.at = at;
    if (bucket.tokens < 1) return holds.hold(OPERATOR_HOLD_MS);
    bucket.tokens -= 1;
    return RELEASED;
  };
}

/** Answers held back: each for `ms`, at most MAX_HELD_REFUSALS at once (past it, at once). */
function createHolds() {
  let held = 0;
  return {
    hold(ms: number): Promise<void> {
      if (ms === 0 || held >= MAX_HELD_REFUSALS) return RELEASED;
      held++;
      return new Promise<void>((resolve) =>
        setTimeout(() => {
          held--;
          resolve();
        }, ms),
      );
    },
    get held(): number {
      return held;
    },
  };
}

/** Requests in flight by name (a tenant, a tenant's key), each up to `max`; a name at 0 is forgotten. */
function createHoldings(max: number) {
  const held = new Map<string, number>();
  return {
    enter(name: string): boolean {
      const holding = held.get(name) ?? 0;
      if (holding >= max) return false;
      held.set(name, holding + 1);
      return true;
    },
    leave(name: string): void {
      const holding = held.get(name) ?? 0;
      if (holding <= 1) held.delete(name);
      else held.set(name, holding - 1);
    },
    of(name: string): number {
      return held.get(name) ?? 0;
    },
  };
}

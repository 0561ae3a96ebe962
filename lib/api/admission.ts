// Admission control for the /charges routes (docs/configuration.md, "Admission control"): a
// token bucket per tenant (429 past it), a cap on requests in flight (503 past it), and each
// tenant's share of that cap (503 past it), all answered at once with Retry-After, before the
// body is read or the database is touched. A tenant's place is held from its token's check to
// its answer: while its body arrives and while it waits on Prefer: wait. Per process: N
// processes admit N times as much.
import type { AdmissionConfig } from "../platform/config.ts";

const MS_PER_S = 1000;
// Refusals held at once at most (API_RATE_LIMIT_HOLD_MS); past it, the next is sent at once. A
// held refusal is a timer and an open socket, not a request in flight (it is counted out of
// API_MAX_IN_FLIGHT first): this bounds what a client with many connections can park here.
const MAX_HELD_REFUSALS = 4096;
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
  /** Refusals held now. */
  readonly held: number;
  /** Counts a request in; false when API_MAX_IN_FLIGHT are already in (nothing counted then). */
  enter(): boolean;
  /** Counts an entered request out. */
  leave(): void;
  readonly inFlight: number;
  /** Counts a request of `tenant` in; false when it already holds API_MAX_IN_FLIGHT_PER_TENANT (nothing counted then). */
  enterTenant(tenant: string): boolean;
  /** Counts a request of `tenant` entered with enterTenant out. */
  leaveTenant(tenant: string): void;
  /** The requests `tenant` holds now. */
  inFlightOf(tenant: string): number;
  /** API_BODY_TIMEOUT_MS. */
  readonly bodyTimeoutMs: number;
}

const ADMITTED: Admitted = { ok: true };
const RELEASED: Promise<void> = Promise.resolve();

export function createAdmission(config: AdmissionConfig, now: () => number = performance.now.bind(performance)): Admission {
  const buckets = new Map<string, Bucket>();
  const rate = config.rateLimitPerS / MS_PER_S; // tokens per ms
  const burst = config.rateBurst;
  let inFlight = 0;
  let held = 0;
  // Only tenants with a request in flight: at most API_MAX_IN_FLIGHT entries.
  const byTenant = new Map<string, number>();
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
      if (config.refusalHoldMs === 0 || held >= MAX_HELD_REFUSALS) return RELEASED;
      held++;
      return new Promise<void>((resolve) =>
        setTimeout(() => {
          held--;
          resolve();
        }, config.refusalHoldMs),
      );
    },
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
    enterTenant(tenant) {
      const holding = byTenant.get(tenant) ?? 0;
      if (holding >= config.maxInFlightPerTenant) return false;
      byTenant.set(tenant, holding + 1);
      return true;
    },
    leaveTenant(tenant) {
      const holding = byTenant.get(tenant) ?? 0;
      if (holding <= 1) byTenant.delete(tenant);
      else byTenant.set(tenant, holding - 1);
    },
    inFlightOf(tenant) {
      return byTenant.get(tenant) ?? 0;
    },
    bodyTimeoutMs: config.bodyTimeoutMs,
    get held() {
      return held;
    },
  };
}

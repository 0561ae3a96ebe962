// Admission control of /charges, per process: a token bucket per tenant (429), caps on requests in
// flight per process, tenant and key (http/in-flight.ts), all before the body is read.
import type { AdmissionConfig } from "../platform/config.ts";

const MS_PER_S = 1000;
// Refusals held at once (API_RATE_LIMIT_HOLD_MS) at most, past it sent at once: a held one is a timer
// and a socket outside API_MAX_IN_FLIGHT, so this bounds what many connections can park here.
const MAX_HELD_REFUSALS = 4096;
// Answers of /metrics, /openapi.json and /docs a second, far above a few scrapers; past it each is
// held OPERATOR_HOLD_MS, so a flood of them cannot take the event loop from requests served.
export const OPERATOR_RATE_PER_S = 100;
export const OPERATOR_HOLD_MS = 250;
// Buckets remembered at most; past it the full ones go (what an unseen tenant gets anyway).
const MAX_BUCKETS = 100_000;

type Bucket = { tokens: number; at: number };

type Admitted = { readonly ok: true } | { readonly ok: false; readonly retryAfterS: number };
export type Admission = ReturnType<typeof createAdmission>;

const ADMITTED: Admitted = { ok: true };
const RELEASED: Promise<void> = Promise.resolve();

export function createAdmission(config: AdmissionConfig, now: () => number = performance.now.bind(performance)) {
  const buckets = new Map<string, Bucket>();
  const rate = config.rateLimitPerS / MS_PER_S; // tokens per ms
  const burst = config.rateBurst;
  let inFlight = 0;
  const byTenant = createHoldings(config.maxInFlightPerTenant);
  const byKey = createHoldings(config.maxInFlightPerKey);
  const holds = createHolds();
  const operator: Bucket = { tokens: OPERATOR_RATE_PER_S, at: now() };
  const sweep = (at: number) => {
    for (const [tenant, bucket] of buckets) if (bucket.tokens + (at - bucket.at) * rate >= burst) buckets.delete(tenant);
  };
  return {
    take(tenant: string): Admitted {
      if (rate === 0) return ADMITTED;
      const at = now();
      let bucket = buckets.get(tenant);
      if (bucket === undefined) {
        if (buckets.size >= MAX_BUCKETS) sweep(at);
        bucket = { tokens: burst, at };
        buckets.set(tenant, bucket);
      } else refill(bucket, at, rate, burst);
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return ADMITTED;
      }
      // Whole seconds (RFC 9110 §10.2.3), at least one.
      return { ok: false, retryAfterS: Math.max(1, Math.ceil((1 - bucket.tokens) / rate / MS_PER_S)) };
    },
    holdRefusal(): Promise<void> {
      return holds.hold(config.refusalHoldMs);
    },
    paceOperator(): Promise<void> {
      refill(operator, now(), OPERATOR_RATE_PER_S / MS_PER_S, OPERATOR_RATE_PER_S);
      if (operator.tokens < 1) return holds.hold(OPERATOR_HOLD_MS);
      operator.tokens -= 1;
      return RELEASED;
    },
    /** False (nothing counted) past API_MAX_IN_FLIGHT, as enterTenant and enterKey past their shares. */
    enter(): boolean {
      if (inFlight >= config.maxInFlight) return false;
      inFlight++;
      return true;
    },
    leave(): void {
      inFlight--;
    },
    get inFlight(): number {
      return inFlight;
    },
    enterTenant: byTenant.enter,
    leaveTenant: byTenant.leave,
    enterKey: byKey.enter,
    leaveKey: byKey.leave,
    bodyTimeoutMs: config.bodyTimeoutMs,
    get held(): number {
      return holds.held;
    },
  };
}

function refill(bucket: Bucket, at: number, perMs: number, burst: number): void {
  bucket.tokens = Math.min(burst, bucket.tokens + (at - bucket.at) * perMs);
  bucket.at = at;
}

function createHolds() {
  let held = 0;
  return {
    hold(ms: number): Promise<void> {
      if (ms === 0 || held >= MAX_HELD_REFUSALS) return RELEASED;
      held++;
      return new Promise<void>((resolve) => setTimeout(resolve, ms)).then(() => void held--);
    },
    get held(): number {
      return held;
    },
  };
}

/** Requests in flight by name (a tenant, a tenant's key) up to `max`; a name at 0 is forgotten. */
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
  };
}

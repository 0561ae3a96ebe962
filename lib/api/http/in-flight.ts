// A /charges request's place in flight, of the process, tenant and key, from its token's check until
// its answer has left; past a cap, 503 (a key's: 409) with Retry-After, not an unbounded queue.
import { problemResponse } from "../problem.ts";
import { RETRY_AFTER_S } from "./answers.ts";
import type { RequestDeps, RequestTrail } from "./context.ts";

export function enterProcess(deps: RequestDeps, trail: RequestTrail): Response | undefined {
  if (!deps.admission.enter()) {
    return overloaded("this process has as many requests in flight as it takes (API_MAX_IN_FLIGHT); retry later");
  }
  trail.admitted = true;
  return undefined;
}

export function enterTenant(deps: RequestDeps, trail: RequestTrail, tenant: string): Response | undefined {
  if (!deps.admission.enterTenant(tenant)) {
    trail.countOut(deps.admission);
    return overloaded("this tenant has as many requests in flight as one tenant may (API_MAX_IN_FLIGHT_PER_TENANT); retry later");
  }
  trail.tenantIn = tenant;
  return undefined;
}

export function enterKey(deps: RequestDeps, trail: RequestTrail, tenant: string, key: string | null): Response | undefined {
  if (key === null) return undefined;
  const scope = `${tenant}\u0000${key}`;
  if (!deps.admission.enterKey(scope)) {
    trail.countOut(deps.admission);
    const detail = "as many requests with this Idempotency-Key are in flight as one key may (API_MAX_IN_FLIGHT_PER_KEY); retry later";
    return problemResponse("inFlight", detail, {}, { "retry-after": RETRY_AFTER_S });
  }
  trail.keyIn = scope;
  return undefined;
}

function overloaded(detail: string): Response {
  return problemResponse("overloaded", detail, {}, { "retry-after": RETRY_AFTER_S });
}

// The cap on /charges requests in flight (API_MAX_IN_FLIGHT), as an Elysia plugin: onRequest,
// before the route is even found, answers 503 with Retry-After past it instead of queueing
// without bound (every waiting request holds its body and a place in the pool's queue); the
// operator's routes are never refused, so a saturated process still says so. Counted out in
// onAfterResponse.
import { Elysia } from "elysia";
import { pathOf } from "../../platform/runtime.ts";
import { problemResponse } from "../problem.ts";
import { RETRY_AFTER_S } from "./answers.ts";
import { needsToken, type RequestContextPlugin, type RequestDeps, type RequestTrail } from "./context.ts";

export function inFlightCap(context: RequestContextPlugin) {
  return new Elysia({ name: "in-flight-cap" })
    .use(context)
    .onRequest(({ request, deps, trail }) => {
      if (!needsToken(pathOf(request.url))) return;
      if (!deps.admission.enter()) {
        const detail = "this process has as many requests in flight as it takes (API_MAX_IN_FLIGHT); retry later";
        return trail.answer(problemResponse("overloaded", detail, {}, { "retry-after": RETRY_AFTER_S }));
      }
      trail.admitted = true;
    })
    .onAfterResponse({ as: "global" }, ({ deps, trail }) => countOut(deps, trail));
}

/** The request leaves the count in flight, once: when answered, or earlier when its refusal is held (authentication.ts). */
export function countOut(deps: Pick<RequestDeps, "admission">, trail: RequestTrail): void {
  if (!trail.admitted) return;
  trail.admitted = false;
  deps.admission.leave();
}

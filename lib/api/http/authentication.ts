// The admission of /charges as an Elysia plugin: `tenant` in the context, or the refusal (503 process
// full, 401 token, 429 rate, 503 tenant's share, 409 key's share) before anything else is read.
import { Elysia, status } from "elysia";
import { AUTH_FAILURE_DETAILS, type AuthResult } from "../auth.ts";
import { problemResponse } from "../problem.ts";
import { RETRY_AFTER_S } from "./answers.ts";
import { enterKey, enterProcess, enterTenant } from "./in-flight.ts";
import { setBodyDeadline } from "../body.ts";
import type { RequestContextPlugin, RequestDeps, RequestTrail } from "./context.ts";

export function authentication(context: RequestContextPlugin) {
  return new Elysia({ name: "authentication" })
    .use(context)
    .derive({ as: "scoped" }, async ({ request, deps, trail }) => {
      const verdict = await admitOnce(deps, trail, request);
      if (typeof verdict !== "string") return status(verdict.status, trail.answer(verdict));
      return { tenant: verdict };
    });
}

/** The tenant or the refusal, decided once: a body route's parser (checks.ts) asks before the derive. */
export function admitOnce(deps: RequestDeps, trail: RequestTrail, request: Request): Promise<string | Response> {
  return (trail.admission ??= admit(deps, trail, request));
}

async function admit(deps: RequestDeps, trail: RequestTrail, request: Request): Promise<string | Response> {
  const full = enterProcess(deps, trail);
  if (full) return full;
  const verdict = await authenticate(deps, trail, request);
  if (typeof verdict !== "string") return verdict;
  const admitted = deps.admission.take(verdict);
  if (!admitted.ok) {
    // Held, the refusal is no request in flight: it must not crowd out admitted ones.
    trail.countOut(deps.admission);
    await deps.admission.holdRefusal();
    return rateLimited(admitted.retryAfterS);
  }
  // The operations' requests of one key run one after another; a read of its state does not.
  const key = request.method === "POST" ? request.headers.get("idempotency-key") : null;
  const refused = enterTenant(deps, trail, verdict) ?? enterKey(deps, trail, verdict, key);
  if (refused) return refused;
  setBodyDeadline(request, trail.started + deps.admission.bodyTimeoutMs);
  return verdict;
}

function rateLimited(retryAfterS: number): Response {
  const detail = "this tenant is over its request rate (API_RATE_LIMIT); retry after Retry-After seconds";
  return problemResponse("rateLimited", detail, {}, { "retry-after": String(retryAfterS) });
}

export async function authenticate(deps: RequestDeps, trail: RequestTrail, request: Request): Promise<string | Response> {
  const result = await deps.auth.authenticate(request.headers.get("authorization"));
  if (result.kind !== "authenticated") {
    deps.counters.countAuthFailure(result.reason);
    trail.fields.authFailure = result.reason;
    return authProblem(result);
  }
  trail.fields.tenant = result.tenant;
  return result.tenant;
}

// RFC 6750 §3: the bare challenge without credentials, invalid_token for a refused token.
function authProblem(result: Exclude<AuthResult, { kind: "authenticated" }>): Response {
  if (result.kind === "unavailable") {
    return problemResponse("unavailable", AUTH_FAILURE_DETAILS[result.reason], {}, { "retry-after": RETRY_AFTER_S });
  }
  const challenge = result.tokenSent ? 'Bearer error="invalid_token"' : "Bearer";
  return problemResponse("unauthorized", AUTH_FAILURE_DETAILS[result.reason], {}, { "www-authenticate": challenge });
}

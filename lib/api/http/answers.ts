// The handler of every idempotent operation: Elysia has checked headers, ids and body; the core
// runs, and its outcome is answered by one exhaustive switch.
import { traceparentOf as spanTraceparent } from "../../platform/trace-context.ts";
import type { Static } from "@sinclair/typebox";
import { keyHashField } from "../../platform/redact.ts";
import { parseIdempotencyKey } from "../../idempotency/keys.ts";
import { preferredWait } from "../schemas.ts";
import { endpointOf, type Operation, type UnknownCause } from "../../idempotency/model.ts";
import type { Outcome } from "../../idempotency/outcome.ts";
import { problemResponse, specResponse, type ProblemName } from "../problem.ts";
import type { RequestContext } from "./context.ts";

// Before retrying a 409 (the first request is one short statement) or a 503 (the pool reconnects fast).
export const RETRY_AFTER_S = "1";

export function operationHandler(op: Operation): (ctx: RequestContext) => Promise<Response> {
  const endpoint = endpointOf(op);
  return async (ctx) => {
    const parsed = parseIdempotencyKey(ctx.request.headers.get("idempotency-key"));
    if (!parsed.ok) return problemResponse("invalidKey", parsed.reason);
    const request = {
      tenant: ctx.tenant,
      key: parsed.key,
      input: { params: ctx.params, body: ctx.body as Static<typeof op.body>, settings: ctx.deps.core.settings },
      traceparent: ctx.span ? spanTraceparent(ctx.span) : traceparentOf(ctx.request),
    };
    const wait = preferredWait(ctx.request.headers.get("prefer"));
    if (wait.kind === "invalid") return problemResponse("invalidPrefer", wait.detail);
    if (wait.kind === "none") return answered(ctx, endpoint, await ctx.deps.core.run(op, request), parsed.key);
    const { outcome, waitedSeconds } = await ctx.deps.core.runWaiting(op, request, wait.seconds);
    const response = answered(ctx, endpoint, outcome, parsed.key);
    if (waitedSeconds !== undefined) response.headers.set("preference-applied", `wait=${waitedSeconds}`);
    return response;
  };
}

/** After the commit: a failure counting or logging it is logged, never turned into a 500. */
function answered(ctx: RequestContext, endpoint: string, outcome: Outcome, key: string): Response {
  try {
    ctx.deps.counters.countOutcome(endpoint, outcome.kind);
    ctx.fields.outcome = outcome.kind;
    ctx.fields.keyHash = keyHashField(key);
  } catch (error) {
    ctx.deps.log.error("outcome bookkeeping failed", { error: String(error) });
  }
  return outcomeResponse(outcome);
}

export function outcomeResponse(outcome: Outcome): Response {
  switch (outcome.kind) {
    case "created":
    case "replayed":
      return stored(outcome.status, outcome.body, outcome.kind === "replayed", "application/json", outcome.location);
    case "payload_conflict":
      return problemResponse("payloadConflict", "this Idempotency-Key was already used with a different request");
    case "expired":
      return expiredProblem(outcome.location);
    case "in_flight":
      return problemResponse("inFlight", "a request with this Idempotency-Key is still being processed; retry later", {}, { "retry-after": RETRY_AFTER_S });
    case "refused":
      return specResponse(outcome.refusal.problem, outcome.refusal.detail, outcome.refusal.extensions);
    case "stored_problem":
      return stored(outcome.status, outcome.body, outcome.replayed, "application/problem+json");
    case "parked":
      return problemResponse("keyParked", `this Idempotency-Key's recovery data is unreadable (${outcome.reason}); an operator resolves it (bun run ops parked)`);
    case "unknown_outcome":
      return problemResponse(UNKNOWN_PROBLEMS[outcome.cause], `${outcome.detail}; the outcome is unknown, nothing was stored: retry with the same Idempotency-Key`, {}, { "retry-after": RETRY_AFTER_PROCESSOR_S });
    default: {
      const unreachable: never = outcome;
      throw new Error(`bug: unhandled outcome ${JSON.stringify(unreachable)}`);
    }
  }
}

const UNKNOWN_PROBLEMS: Readonly<Record<UnknownCause, ProblemName>> = {
  processor_error: "processorError",
  unreachable: "processorUnavailable",
  processing: "processorUnavailable",
  timeout: "processorTimeout",
};
// The lease was given up with the answer, so the key may resume at once; a second spares an outage.
const RETRY_AFTER_PROCESSOR_S = "1";

/** 410, nothing done: the original resource in Location and `resource`, so a client finds it. */
function expiredProblem(location: string | undefined): Response {
  const detail = "this Idempotency-Key's stored answer has expired; the request was not repeated" + (location === undefined ? "" : `: its resource is ${location}`);
  return problemResponse("keyExpired", detail, location === undefined ? {} : { resource: location }, location === undefined ? {} : { location });
}

function stored(status: number, body: string, replayed: boolean, contentType: string, location?: string): Response {
  const headers: Record<string, string> = location === undefined ? { "content-type": contentType } : { "content-type": contentType, location };
  if (replayed) headers["idempotent-replayed"] = "true";
  return new Response(body, { status, headers });
}

// W3C Trace Context 00: anything else is dropped rather than stored and sent to subscribers.
const TRACEPARENT_RE = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

function traceparentOf(request: Request): string | null {
  const value = request.headers.get("traceparent")?.trim().toLowerCase();
  return value && TRACEPARENT_RE.test(value) && !/^00-0{32}-|-0{16}-/.test(value) ? value : null;
}

// RFC 9457 problem details: every error the API answers has type, title, status and detail, and
// never a stack trace or SQL text.
import { OPERATION_PROBLEMS, PROBLEM_BASE, type ProblemSpec } from "../idempotency/problem-types.ts";

export { PROBLEM_BASE, type ProblemSpec };

export const PROBLEMS = {
  invalidKey: { slug: "invalid-idempotency-key", title: "Invalid Idempotency-Key", status: 400 },
  invalidId: { slug: "invalid-id", title: "Invalid id", status: 400 },
  invalidQuery: { slug: "invalid-query", title: "Invalid query parameter", status: 400 },
  invalidPrefer: { slug: "invalid-prefer", title: "Invalid Prefer wait", status: 400 },
  unauthorized: { slug: "unauthorized", title: "Unauthorized", status: 401 },
  inFlight: { slug: "request-in-flight", title: "Request in flight", status: 409 },
  keyParked: { slug: "idempotency-key-parked", title: "Idempotency-Key parked for an operator", status: 409 },
  bodyTooLarge: { slug: "body-too-large", title: "Request body too large", status: 413 },
  bodyTimeout: { slug: "body-timeout", title: "Request body not received in time", status: 408 },
  unsupportedMediaType: { slug: "unsupported-media-type", title: "Unsupported media type", status: 415 },
  keyExpired: { slug: "idempotency-key-expired", title: "Idempotency-Key expired", status: 410 },
  payloadConflict: { slug: "idempotency-key-reused", title: "Idempotency-Key reused with another request", status: 422 },
  ...OPERATION_PROBLEMS,
  processorError: { slug: "processor-error", title: "Payment processor error, outcome unknown", status: 502 },
  processorUnavailable: { slug: "processor-unavailable", title: "Payment processor unreachable, outcome unknown", status: 503 },
  processorTimeout: { slug: "processor-timeout", title: "Payment processor did not answer in time, outcome unknown", status: 504 },
  rateLimited: { slug: "rate-limited", title: "Too many requests", status: 429 },
  overloaded: { slug: "overloaded", title: "Too many requests in flight", status: 503 },
  internal: { slug: "internal-error", title: "Internal server error", status: 500 },
  unavailable: { slug: "service-unavailable", title: "Service unavailable", status: 503 },
} as const satisfies Record<string, ProblemSpec>;

export type ProblemName = keyof typeof PROBLEMS;

export class ProblemError extends Error {
  constructor(
    readonly problem: ProblemName,
    readonly detail: string,
    readonly extensions: Record<string, unknown> = {},
  ) {
    super(detail);
  }
}

type Extensions = Record<string, unknown>;

export function problemResponse(name: ProblemName, detail: string, extensions: Extensions = {}, headers: Record<string, string> = {}): Response {
  return specResponse(PROBLEMS[name], detail, extensions, headers);
}

export function specResponse(spec: ProblemSpec, detail: string, extensions: Extensions = {}, headers: Record<string, string> = {}): Response {
  const body = { type: PROBLEM_BASE + spec.slug, title: spec.title, status: spec.status, detail, ...extensions };
  return new Response(JSON.stringify(body), { status: spec.status, headers: { "content-type": "application/problem+json", ...headers } });
}

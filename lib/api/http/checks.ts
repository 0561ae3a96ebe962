// A body route's parser (strict JSON; 415, 413, 400 as a ParseError), then Elysia's validation of
// headers, ids, query and body, whose refusals validationProblem answers in one fixed order.
import type { ValidationError } from "elysia";
import type { TSchema } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../../idempotency/keys.ts";
import { invalidBody, readJsonBody, schemaFaults } from "../body.ts";
import { ProblemError, problemResponse } from "../problem.ts";
import { checkOf, preferredWait } from "../schemas.ts";
import { invalidAfter } from "../events-read.ts";
import { admitOnce } from "./authentication.ts";
import { nounOf, type BodyChecks, type RequestDeps, type RequestTrail } from "./context.ts";
import { isUuid } from "../../platform/uuid.ts";

// The parse of a request refused admission (the derive answers it); undefined would run Elysia's parser.
const UNREAD_BODY: unique symbol = Symbol("unread body");

/** Elysia parses before it derives: admitted first, a refused request costs its token's check only. */
export function bodyParser(schema: TSchema) {
  type ParseContext = { readonly request: Request; readonly deps: RequestDeps; readonly trail: RequestTrail };
  const requiresNothing = schema.type === "object" && ((schema.required as unknown[] | undefined) ?? []).length === 0;
  const checks: BodyChecks = { body: schema, empty: requiresNothing ? {} : undefined };
  return async ({ request, deps, trail }: ParseContext): Promise<unknown> => {
    trail.body = checks;
    try {
      if (typeof (await admitOnce(deps, trail, request)) !== "string") return UNREAD_BODY;
    } catch {
      // The derive awaits the same verdict and answers its failure (a 503), not the parser.
      return UNREAD_BODY;
    }
    return readJsonBody(request, checks.empty);
  };
}

/** What reading the body threw: our 415, 413 or 400, or anything else as "not valid JSON". */
export function bodyProblem(cause: unknown): Response {
  const error = cause instanceof ProblemError ? cause : new ProblemError("invalidBody", "the body is not valid JSON");
  return problemResponse(error.problem, error.detail, error.extensions);
}

type RefusedContext = { readonly request: Request; readonly params?: Readonly<Record<string, string>>; readonly body?: unknown };

/** Elysia's refusal answered in one order: ids, body, Idempotency-Key, Prefer, query (re-checked here). */
export function validationProblem(ctx: RefusedContext, trail: RequestTrail, error: ValidationError): Response {
  const params = ctx.params ?? {};
  const badId = Object.keys(params).find((name) => !isUuid(params[name] ?? ""));
  if (badId !== undefined) return problemResponse("invalidId", `the ${nounOf(badId)} id must be a UUID`);
  const check = trail.body && checkOf(trail.body.body);
  if (check && !check.Check(ctx.body)) {
    const { faults, more, cut } = schemaFaults(check.Errors(ctx.body));
    return bodyProblem(invalidBody(faults, more, cut));
  }
  switch (error.type) {
    case "headers": {
      const key = parseIdempotencyKey(ctx.request.headers.get("idempotency-key"));
      if (!key.ok) return problemResponse("invalidKey", key.reason);
      const wait = preferredWait(ctx.request.headers.get("prefer"));
      if (wait.kind === "invalid") return problemResponse("invalidPrefer", wait.detail);
      break;
    }
    case "query":
      // The one query validated: GET /charges/:id/events's `after`.
      return invalidAfter();
  }
  // Every schema a route validates is one of the checks above: anything else is a bug.
  trail.fields.error = `bug: Elysia refused the ${error.type} past the route's own checks`;
  return problemResponse("internal", "an unexpected error occurred");
}

const FIXED_MESSAGE = "refused by the route's schema";

/** A fixed `error` on each node, or Elysia's ValidationError formats the value refused into its message. */
export function withFixedErrors<S extends TSchema>(schema: S): S {
  return fixed(schema) as S;
}

function fixed(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(fixed);
  if (node === null || typeof node !== "object") return node;
  // Spread keeps TypeBox's symbol keys (Kind, OptionalKind).
  const out: Record<string | symbol, unknown> = { ...(node as Record<string | symbol, unknown>) };
  for (const key of ["properties", "patternProperties"] as const) {
    const members = out[key] as Record<string, unknown> | undefined;
    if (members) out[key] = Object.fromEntries(Object.entries(members).map(([name, member]) => [name, fixed(member)]));
  }
  for (const key of ["items", "anyOf", "allOf", "oneOf", "not", "additionalProperties", "prefixItems"] as const) {
    if (typeof out[key] === "object") out[key] = fixed(out[key]);
  }
  out.error = FIXED_MESSAGE;
  return out;
}

export function isFixedError(key: string, value: unknown): boolean {
  return key === "error" && value === FIXED_MESSAGE;
}

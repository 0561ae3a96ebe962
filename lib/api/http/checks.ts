// What Elysia's lifecycle is given to check a request with, and how its verdicts are answered.
// A body route's parser (bodyParser) reads the body as strict JSON: media type (415), size
// (413), nesting depth, syntax and strictness (400), answered in app.ts's onError as Elysia's
// ParseError. Elysia then validates the headers, the path's ids, the query and the body
// against the route's TypeBox schemas, and onError answers a refusal with validationProblem:
// the same 400 problems, in the same order, whichever check Elysia ran first.
import type { ValidationError } from "elysia";
import type { TSchema } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../../idempotency/keys.ts";
import { invalidBody, readJsonBody, schemaFaults } from "../body.ts";
import { ProblemError, problemResponse } from "../problem.ts";
import { checkOf } from "../schemas.ts";
import { invalidAfter } from "../events-read.ts";
import { admitOnce } from "./authentication.ts";
import { preferredWait } from "./prefer.ts";
import { nounOf, type BodyChecks, type RequestDeps, type RequestTrail } from "./context.ts";
import { isUuid } from "../../platform/uuid.ts";

/**
 * What a body route's parser gives for a request it did not read, its token or rate refused:
 * the token's derive answers it before Elysia validates anything. Not undefined, which would
 * hand the body to Elysia's own JSON parser.
 */
export const UNREAD_BODY: unique symbol = Symbol("unread body");

interface ParseContext {
  readonly request: Request;
  readonly deps: RequestDeps;
  readonly trail: RequestTrail;
}

/**
 * A body route's parse hook: strict JSON (body.ts), its refusal thrown as Elysia's ParseError
 * and answered in onError. Elysia parses before it derives, and the token must come first (a
 * refused request costs the check of its token and nothing else): the hook admits the request
 * (admitOnce, whose verdict the token's derive then finds) and reads the body only then.
 */
export function bodyParser(schema: TSchema): (ctx: ParseContext) => Promise<unknown> {
  const checks: BodyChecks = { body: schema, empty: requiresNothing(schema) ? {} : undefined };
  return async ({ request, deps, trail }) => {
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

function requiresNothing(schema: TSchema): boolean {
  return schema.type === "object" && (schema.required === undefined || (schema.required as unknown[]).length === 0);
}

/** What reading the body threw: our 415, 413 or 400, or anything else as "not valid JSON". */
export function bodyProblem(cause: unknown): Response {
  const error = cause instanceof ProblemError ? cause : new ProblemError("invalidBody", "the body is not valid JSON");
  return problemResponse(error.problem, error.detail, error.extensions);
}

interface RefusedContext {
  readonly request: Request;
  readonly params?: Readonly<Record<string, string>>;
  readonly body?: unknown;
}

/**
 * The answer to Elysia's refusal of a request, in the order the checks have always run after
 * reading the body: the path's ids, the body's schema, the Idempotency-Key, Prefer, the query.
 * Elysia validates headers first, so whatever it refused, the earlier checks are asked again
 * here (a few compiled checks, on refusals only).
 */
export function validationProblem(ctx: RefusedContext, trail: RequestTrail, error: ValidationError): Response {
  const params = ctx.params ?? {};
  const badId = invalidIdProblem(params);
  if (badId) return badId;
  if (trail.body !== undefined && !checkOf(trail.body.body).Check(ctx.body)) return schemaProblem(trail.body.body, ctx.body);
  switch (error.type) {
    case "headers": {
      const key = parseIdempotencyKey(ctx.request.headers.get("idempotency-key"));
      if (!key.ok) return problemResponse("invalidKey", key.reason);
      const wait = preferredWait(ctx.request.headers.get("prefer"));
      if (wait.kind === "invalid") return problemResponse("invalidPrefer", wait.detail);
      break;
    }
    case "query":
      // The one query a route validates is GET /charges/:id/events's `after`.
      return invalidAfter();
  }
  // Every schema a route validates is one of the checks above: anything else is a bug.
  trail.fields.error = `bug: Elysia refused the ${error.type} past the route's own checks`;
  return problemResponse("internal", "an unexpected error occurred");
}

/** The 400 invalid-id problem for the first path parameter that is not a UUID (every parameter of ours is one), if any. */
function invalidIdProblem(params: Readonly<Record<string, string>>): Response | undefined {
  const bad = Object.keys(params).find((name) => !isUuid(params[name] ?? ""));
  return bad === undefined ? undefined : problemResponse("invalidId", `the ${nounOf(bad)} id must be a UUID`);
}

/** The 400 naming a few of the fields of `value` that fail `schema`, then how many more. */
function schemaProblem<S extends TSchema>(schema: S, value: unknown): Response {
  const { faults, more, cut } = schemaFaults(checkOf(schema).Errors(value));
  return bodyProblem(invalidBody(faults, more, cut));
}

// What a refusal's message is, in place of the value Elysia's ValidationError would format.
const FIXED_MESSAGE = "refused by the route's schema";

/**
 * `schema` as Elysia validates it: the same checks, each node carrying a fixed `error`. On a
 * refusal Elysia builds a ValidationError before any hook of ours runs, and its message
 * formats the whole value refused (pretty-printed unless NODE_ENV=production), unless the
 * failing node has an `error`: with one, the message is those fixed words, whatever was sent.
 * The document shows the schema without them (documentation.ts).
 */
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

/** Whether `key` is the one `withFixedErrors` adds (documentation.ts leaves it out of the document). */
export function isFixedError(key: string, value: unknown): boolean {
  return key === "error" && value === FIXED_MESSAGE;
}

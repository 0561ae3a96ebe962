// What a route's own transform reads and checks before Elysia's validation runs: the body (after
// the token, which Elysia's parse would precede) and the path's ids. Elysia's check of the same
// schemas then always passes; its ValidationError, which formats the whole value it refused
// (pretty-printed unless NODE_ENV=production), is never built from a request.
import type { Static, TSchema } from "@sinclair/typebox";
import { invalidBody, readJsonBody, schemaFaults } from "../body.ts";
import { ProblemError, problemResponse } from "../problem.ts";
import { checkOf } from "../schemas.ts";
import { invalidIdProblem } from "./context.ts";

/**
 * A request answered before its handler, thrown from a transform: Elysia answers a thrown
 * error's toResponse() as it is (no onError, no formatting).
 */
export class Answered extends Error {
  constructor(readonly response: Response) {
    super("answered before the handler");
  }

  toResponse(): Response {
    return this.response;
  }
}

/**
 * A body route's parse: nothing read yet (the token is checked first, in derive), and the
 * media type the document shows. The route's transform reads the body (readBody).
 */
export const DEFERRED_BODY: [() => null, "application/json"] = [() => null, "application/json"];

/** The body as strict JSON; else throws its answer (415, 413, 400). */
export async function readBody(request: Request): Promise<unknown> {
  try {
    return await readJsonBody(request);
  } catch (error) {
    throw new Answered(bodyProblem(error));
  }
}

/** `value` if it passes `schema`; else throws the 400 naming a few failing fields. */
export function checkBody<S extends TSchema>(schema: S, value: unknown): Static<S> {
  const check = checkOf(schema);
  if (check.Check(value)) return value;
  const { faults, more } = schemaFaults(check.Errors(value));
  throw new Answered(bodyProblem(invalidBody(faults, more)));
}

/** What reading the body threw: our 415, 413 or 400, or anything else as "not valid JSON". */
export function bodyProblem(cause: unknown): Response {
  const error = cause instanceof ProblemError ? cause : new ProblemError("invalidBody", "the body is not valid JSON");
  return problemResponse(error.problem, error.detail, error.extensions);
}

/** Throws the 400 of the first path parameter that is not a UUID (every parameter of ours is one). */
export function refuseBadIds(params: Readonly<Record<string, string>> | undefined): void {
  // A route without parameters has none in its context (Elysia's type says otherwise).
  if (params === undefined) return;
  const bad = invalidIdProblem(params, Object.keys(params));
  if (bad) throw new Answered(bad);
}

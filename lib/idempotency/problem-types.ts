// The problem types' URI base, how an operation declares one of its own (by the client's PROBLEM
// name), and the two every operation may answer; lib/api/problem.ts adds the API's.

export const PROBLEM_BASE = "https://charges.example/problems/";

/** One problem type: its URI's last segment, its title and its status. */
export interface ProblemSpec {
  readonly slug: string;
  readonly title: string;
  readonly status: number;
}

export interface NamedProblem extends ProblemSpec {
  readonly name: string;
}

export const problemType = (name: string, slug: string, title: string, status = 422): NamedProblem => ({ name, slug, title, status });

/** An operation's problem types by name (its Operation.problems). */
export function problemsByName(problems: readonly NamedProblem[]): Readonly<Record<string, ProblemSpec>> {
  return Object.fromEntries(problems.map(({ name, ...spec }) => [name, spec]));
}

export const OPERATION_PROBLEMS = {
  invalidBody: { slug: "invalid-body", title: "Invalid request body", status: 400 },
  notFound: { slug: "not-found", title: "Not found", status: 404 },
} as const satisfies Record<string, ProblemSpec>;

/** An RFC 9457 body as JSON text, members in a fixed order (stored and replayed byte for byte). */
export function problemJson(spec: ProblemSpec, detail: string, extensions: Record<string, unknown> = {}): string {
  return JSON.stringify({ type: PROBLEM_BASE + spec.slug, title: spec.title, status: spec.status, detail, ...extensions });
}

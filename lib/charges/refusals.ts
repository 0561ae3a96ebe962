// An operation's refusals, each declared once: its problem type (under the name the client's
// PROBLEM gives it), its phrase in the API reference's 422, and the answer each of admit's
// reasons makes of it. The operation's `problems`, its 422 line and its `refuse` are made here.
import type { Refusal } from "../idempotency/model.ts";
import { problemsByName, type NamedProblem, type ProblemSpec } from "../idempotency/problem-types.ts";

export interface RefusalType {
  readonly problem: NamedProblem;
  /** Its meaning, as the 422's line in /openapi.json says it. */
  readonly doc: string;
  /** What follows its slug in the 422 line's parenthesis (": its cases", ", with its extension"). */
  readonly note?: string;
}

/** One of admit's reasons: the problem it answers and the answer's detail, from admit's `detail` column. */
export interface Reason {
  readonly problem: ProblemSpec;
  readonly answer: (chargeId: string, detail: string | null) => { readonly detail: string; readonly extensions?: Record<string, unknown> };
}

const LATTER = ["", "", "two", "three", "four"];

/** The 422's line in the API reference: the key's reuse, the refusals admit makes (the key unused), the processor's. */
export function document422(admitted: readonly RefusalType[], processor: RefusalType): string {
  const phrase = (r: RefusalType, unused = "") => `${r.doc} (${r.problem.slug}${r.note ?? ""}${unused})`;
  const own =
    admitted.length === 1
      ? `, or ${phrase(admitted[0]!, "; the key stays unused")}`
      : `, ${admitted.slice(0, -1).map((r) => phrase(r)).join(", ")}, or ${phrase(admitted.at(-1)!)}; the key stays unused for the latter ${LATTER[admitted.length]}`;
  return `The key was used with another request (idempotency-key-reused)${own}. With a processor, also its refusal (${processor.problem.slug}), stored under the key`;
}

export const problemsOf = (types: readonly RefusalType[]) => problemsByName(types.map((r) => r.problem));

/** The operation's `refuse`: the problem of admit's `reason`; any other reason is a bug. */
export function refuseBy(operation: string, reasons: Readonly<Record<string, Reason>>) {
  return (reason: string, detail: string | null, chargeId: string): Refusal => {
    const found = Object.hasOwn(reasons, reason) ? reasons[reason] : undefined;
    if (found === undefined) throw new Error(`bug: ${operation} refused with ${reason}`);
    return { problem: found.problem, ...found.answer(chargeId, detail) };
  };
}

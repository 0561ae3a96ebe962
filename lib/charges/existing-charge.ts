// What the operations on an existing charge share (refunds, and every change of an authorized
// charge: transition.ts): the admit that locks the charge, and their refusals, each declared once
// (its problem type, its phrase in the API reference, the answer each of admit's reasons makes).
import type { Sql } from "../platform/db.ts";
import { PROCESSOR_REFUSALS, type Fragment, type OperationInput, type Refusal } from "../idempotency/model.ts";
import { OPERATION_PROBLEMS, problemsByName, type NamedProblem, type ProblemSpec } from "../idempotency/problem-types.ts";

/** Lowercased: a UUID's case never makes another charge or another fingerprint. */
export const chargeIdOf = (params: Readonly<Record<string, string>>): string => params.id!.toLowerCase();

/**
 * An operation's admit on the charge its requests name (`req.charge_id`): `target` (`select`:
 * columns of `c`) and `admit` (each locked request beside its charge `t`, null when none;
 * `checks`: columns after `n`). Charges lock in id order, so two statements cannot deadlock,
 * and FOR UPDATE reads them as committed now: what admit checks holds until the commit.
 */
export function admitOnCharge(sql: Sql, select: Fragment, checks: Fragment): Fragment {
  return sql`
      target as (
        select ${select}
          from charges c
         where (c.id, c.tenant) in (select r.charge_id, r.tenant from req r join lock l on l.n = r.n where l.got)
         order by c.id
           for update
      ),
      admit as (
        select l.n,
               ${checks}
          from lock l
          join req r on r.n = l.n
          left join target t on t.id = r.charge_id and t.tenant = r.tenant
         where l.got
      )`;
}

export interface RefusalType {
  /** Under the name the client's PROBLEM gives it. */
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

/**
 * The operation's `problems` and `refusals`, whose 422 line names the key's reuse, the refusals
 * admit makes (the key unused) and the processor's.
 */
export function documented(admitted: readonly RefusalType[], processor: RefusalType) {
  const phrase = (r: RefusalType, unused = "") => `${r.doc} (${r.problem.slug}${r.note ?? ""}${unused})`;
  const own =
    admitted.length === 1
      ? `, or ${phrase(admitted[0]!, "; the key stays unused")}`
      : `, ${admitted.slice(0, -1).map((r) => phrase(r)).join(", ")}, or ${phrase(admitted.at(-1)!)}; the key stays unused for the latter ${LATTER[admitted.length]}`;
  return {
    problems: problemsByName([...admitted, processor].map((r) => r.problem)),
    refusals: {
      "404": "Unknown charge, or another tenant's; the key stays unused",
      "422": `The key was used with another request (idempotency-key-reused)${own}. With a processor, also its refusal (${processor.problem.slug}), stored under the key`,
      ...PROCESSOR_REFUSALS,
    },
  };
}

/** The operation's `refuse`: the problem of admit's `reason` (charge_not_found or one of `reasons`), else a bug. */
export function refuseBy(operation: string, reasons: Readonly<Record<string, Reason>>) {
  const all: Readonly<Record<string, Reason>> = {
    charge_not_found: { problem: OPERATION_PROBLEMS.notFound, answer: (id) => ({ detail: `no charge with id ${id}` }) },
    ...reasons,
  };
  return (reason: string, detail: string | null, { params }: OperationInput<unknown>): Refusal => {
    const found = Object.hasOwn(all, reason) ? all[reason] : undefined;
    if (found === undefined) throw new Error(`bug: ${operation} refused with ${reason}`);
    return { problem: found.problem, ...found.answer(chargeIdOf(params), detail) };
  };
}

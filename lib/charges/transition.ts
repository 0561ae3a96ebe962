// One factory for a change of an authorized charge (capture, cancel, an increment): an operation
// declares its body, statuses, columns, event, processor call and refusals, and gets its route,
// ledger statement, phase 1 (the charge `during`), step and phase 3. Its SQL reads `charge`
// (before the change), `request` and, in event data, `before`: transition-sql.ts aliases them.
import { Type as t, type Static, type TObject, type TSchema } from "@sinclair/typebox";
import type Stripe from "stripe";
import type { EventType } from "./events.ts";
import { problemJson, type NamedProblem } from "../idempotency/problem-types.ts";
import { chargeIdOf, documented, refuseBy, type Reason, type RefusalType } from "./existing-charge.ts";
import { mapCall, type ProcessorAdapter } from "./processor.ts";
import { checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { fromRead, paymentView, payments, UNEXPECTED_STATE, unknownAfter, type PaymentView } from "./charge-steps.ts";
import { Charge, idOf, type ChargeStatus } from "./charges.ts";
import { foreign, type FinalRow, type Fragment, type Operation, type SqlType, type StepContext, type StepResult } from "../idempotency/model.ts";
import { columnOf, transitionSql, type At, type Rows } from "./transition-sql.ts";

export { problemType } from "../idempotency/problem-types.ts";

/** A check on the charge and the request by admit (the key stays unused when it refuses), told the charge's amount. */
interface Check<M extends string = string> extends RefusalType {
  readonly when: (at: At<M>) => Fragment;
  readonly detail: (chargeId: string, authorizedCents: number) => string;
}

/** What phase 1's admit records of the charge, and every transition's resume. */
const Snapshot = {
  chargeId: t.String({ format: "uuid" }),
  traceparent: t.Union([t.String(), t.Null()]),
  paymentId: t.String(),
  authorizedCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
  currency: t.String(),
  createdAt: t.String(),
  failureCode: t.Optional(t.String()),
  resolvedBy: t.Optional(t.String()),
};

/** The request's members beside the charge id: its amount when the change has one (schema `A`). */
type Member<A> = A extends TSchema ? "amountCents" : never;

/** The resume of a transition whose request's amount is `A` and whose step adds `O`. */
type TransitionResume<A = undefined, O = {}> = Static<TObject<typeof Snapshot>> &
  (A extends TSchema ? { readonly amountCents: Static<A> } : {}) & { readonly [K in keyof O]?: O[K] extends TSchema ? Static<O[K]> : never };

/**
 * The charge's columns a change sets beside its status, by the charge's member (its column in
 * snake case): in the ledger (of the charge and the request), and from the final resume.
 */
type Sets<M extends string, R> = Readonly<Record<string, { readonly ledger: (at: At<M>) => Fragment; readonly final: (resume: R) => number }>>;

interface Call<R> {
  readonly send: (api: Stripe, resume: R, idempotencyKey: string) => Promise<Stripe.PaymentIntent>;
  /** What the payment decides; undefined: the change is not made yet. */
  readonly decide: (payment: PaymentView, resume: R) => StepResult<R> | undefined;
}

interface Transition<B extends TObject, A extends TSchema | undefined, O extends Readonly<Record<string, TSchema>>> {
  readonly name: string;
  readonly summary: string;
  readonly path: `/charges/:id/${string}`;
  readonly body: B;
  /** The body's amountCents: the request's amount_cents, in the fingerprint when named, in the resume as `A`. */
  readonly amountCents?: A;
  /** The charge's status while the processor is asked; `updating` when the change names none. */
  readonly during?: ChargeStatus;
  readonly to: ChargeStatus;
  /**
   * ["capture", "captured"]: the verb of the docs and the details, and its past participle. The verb
   * is the processor key's segment too: `<charge id>:<verb>:<attempt>`, its attempts in `<verb>Attempt`.
   */
  readonly verb: readonly [string, string];
  readonly sets?: Sets<Member<A>, TransitionResume<A, O>>;
  readonly event: { readonly type: EventType; readonly data: (rows: Rows) => Readonly<Record<string, Fragment>> };
  readonly resume?: O;
  readonly call: Call<TransitionResume<A, O>>;
  /** `state`: the charge is not authorized (or has no payment at the processor); `processor`: its refusal, stored. */
  readonly refusals: { readonly state: NamedProblem; readonly checks?: readonly Check<Member<A>>[]; readonly processor: NamedProblem };
}

const STATE = (problem: NamedProblem): RefusalType =>
  ({ problem, doc: "the charge is not authorized", note: ": captured, canceled, failed, or captured at once" });

// Any transition as the factory holds it: its own members are read by name.
type AnyResume = TransitionResume & Readonly<Record<string, unknown>>;
type AnyTransition = Omit<Transition<TObject, TSchema | undefined, {}>, "sets" | "call"> & { readonly sets?: Sets<string, AnyResume>; readonly call: Call<AnyResume> };

/** The request's columns and their values: `charge_id`, and `amount_cents` when the change has an amount. */
function requestOf(d: AnyTransition) {
  const amount = d.amountCents !== undefined;
  const amountOf = (body: unknown) => (amount ? (body as { amountCents?: number }).amountCents : undefined);
  return {
    columns: { charge_id: "uuid", ...(amount && { amount_cents: "int" }) } as Readonly<Record<string, SqlType>>,
    columnsOf: (params: Readonly<Record<string, string>>, body: unknown) =>
      ({ charge_id: chargeIdOf(params), ...(amount && { amount_cents: amountOf(body) ?? null }) }),
    membersOf: (body: unknown) => (amount ? { amountCents: amountOf(body) ?? null } : {}),
    /** Absent, the amount is the same request as before it existed. */
    fingerprintOf: (body: unknown): Readonly<Record<string, number>> => {
      const cents = amountOf(body);
      return cents === undefined ? {} : { amountCents: cents };
    },
  };
}

/**
 * The step: the change under `<charge id>:<key>:<attempt>`. The processor applies it once, so a
 * resumed key reads the payment first (an earlier holder's answer may be lost), and a refusal
 * because the payment moved on is settled by reading it.
 */
function stepOf(call: AnyTransition["call"], key: string) {
  const attemptName = `${key}Attempt`;
  const capabilities = (p: ProcessorAdapter) => ({
    send: (r: AnyResume, key: string) => mapCall(p.call("POST", (api) => call.send(api, r, key)), paymentView),
    retrieve: payments(p).retrieve,
  });
  type Context = StepContext<AnyResume, ReturnType<typeof capabilities>>;
  const step = async ({ resume, processor, resumed }: Context): Promise<StepResult<AnyResume>> => {
    const read = async () => fromRead(await processor.retrieve(resume.paymentId), resume, call.decide);
    const known = resumed ? await read() : undefined;
    if (known !== undefined) return known;
    const attempt = resume[attemptName];
    const sent = await processor.send(resume, `${resume.chargeId}:${key}:${typeof attempt === "number" ? attempt : 0}`);
    switch (sent.kind) {
      case "ok":
        return call.decide(sent.value, resume) ?? { kind: "unknown", cause: "processing", detail: `the payment is ${sent.value.status}`, resume };
      case "refused": {
        const refused: StepResult<AnyResume> = { kind: "final", outcome: "refused", resume: { ...resume, failureCode: sent.code } };
        return sent.code === UNEXPECTED_STATE ? ((await read()) ?? refused) : refused;
      }
      case "unknown":
        return unknownAfter(sent, resume, attemptName);
    }
  };
  return { attemptName, capabilities, step };
}

/** Phase 3 as values: the charge changed (its `sets` from the resume), or the processor's refusal stored. */
function finalOf(d: AnyTransition) {
  const sets = Object.entries(d.sets ?? {});
  const problem = d.refusals.processor;
  return (outcome: "succeeded" | "refused", resume: AnyResume): FinalRow => {
    const { chargeId } = resume;
    if (outcome === "succeeded") {
      const members = Object.fromEntries(sets.map(([m, s]) => [m, s.final(resume)]));
      const body = checkedJson(Charge, { id: chargeId, amountCents: resume.authorizedCents, currency: resume.currency, status: d.to, processorPaymentId: resume.paymentId, ...members, createdAt: resume.createdAt });
      return { response: { status: 200, body }, columns: { charge_id: chargeId, succeeded: true, ...Object.fromEntries(sets.map(([m]) => [columnOf(m), members[m]!])) } };
    }
    const failureCode = resume.failureCode ?? "refused";
    return {
      response: { status: problem.status, body: problemJson(problem, `the payment processor refused the ${d.verb[0]} (${failureCode})`, { chargeId, failureCode }) },
      columns: { charge_id: chargeId, succeeded: false, ...Object.fromEntries(sets.map(([m]) => [columnOf(m), null])) },
    };
  };
}

/** The answers of admit's reasons: not authorized, no payment at the processor, and each check. */
function refuseOf(d: AnyTransition) {
  const [verb, verbed] = d.verb;
  const problem = d.refusals.state;
  const checks = (d.refusals.checks ?? []).map((c, i): [string, Reason] => [
    `check_${i}`,
    {
      problem: c.problem,
      answer: (id, cents) => ({ detail: c.detail(id, Number(cents)), extensions: { authorizedCents: Number(cents) } }),
    },
  ]);
  return refuseBy(d.name, {
    charge_not_in_state: { problem, answer: (id, status) => ({ detail: `charge ${id} is ${status}: only an authorized charge (capture: manual) can be ${verbed}`, extensions: { chargeStatus: status } }) },
    charge_not_at_processor: { problem, answer: (id) => ({ detail: `charge ${id} was authorized without the payment processor: it has no payment there to ${verb}` }) },
    ...Object.fromEntries(checks),
  });
}

function foreignOf(d: AnyTransition, request: ReturnType<typeof requestOf>, finishSql: FinishSqlOf) {
  const { attemptName, capabilities, step } = stepOf(d.call, d.verb[0]);
  return foreign<unknown, AnyResume, ReturnType<typeof capabilities>>({
    columns: request.columns,
    validate: () => undefined,
    prepare: ({ params, body }, traceparent) => ({ columns: request.columnsOf(params, body), resume: { chargeId: chargeIdOf(params), ...request.membersOf(body), traceparent }, exclusive: chargeIdOf(params) }),
    resume: t.Object({ ...Snapshot, ...(d.amountCents && { amountCents: d.amountCents }), [attemptName]: t.Optional(t.Integer({ minimum: 0 })), ...d.resume }),
    operatorIds: ["chargeId", "paymentId"],
    resolution: { succeeded: "paymentId", refused: "failureCode" },
    capabilities,
    firstPoint: "begun",
    steps: { begun: step },
    final: finalOf(d),
    finishSql,
    exclusive: (resume) => resume.chargeId,
  });
}
type FinishSqlOf = ReturnType<typeof transitionSql>["finish"];

export function chargeTransition<B extends TObject, A extends TSchema | undefined = undefined, O extends Readonly<Record<string, TSchema>> = {}>(
  declared: Transition<B, A, O>,
): Operation<B> {
  // Held in its general shape: the bodies its functions get are the route's, checked against `body` first.
  const d = declared as unknown as AnyTransition;
  const request = requestOf(d);
  const checks = d.refusals.checks ?? [];
  const statements = transitionSql({ from: "authorized", during: d.during ?? "updating", to: d.to, checks: checks.map((c, i) => ({ reason: `check_${i}`, when: c.when })), sets: d.sets ?? {}, event: d.event });
  return {
    name: d.name,
    summary: d.summary,
    method: "POST",
    path: d.path,
    uuidParams: ["id"],
    body: declared.body,
    response: Charge,
    status: 200,
    columns: request.columns,
    fingerprint: ({ params, body }) => ({ chargeId: chargeIdOf(params), ...request.fingerprintOf(body) }),
    prepare: ({ params, body }) => ({ columns: request.columnsOf(params, body), body: "", exclusive: chargeIdOf(params) }),
    sql: statements.operation,
    refuse: refuseOf(d),
    locationOf: (body) => `/charges/${idOf(body, "id")}`,
    ...documented([STATE(d.refusals.state), ...checks], { problem: d.refusals.processor, doc: "its refusal" }),
    foreign: foreignOf(d, request, statements.finish),
  };
}

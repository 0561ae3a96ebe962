// One factory for a change of an authorized charge through the processor (capture, cancel,
// an increase of its authorization): an operation declares what is its own (its body, its
// statuses, the columns it sets, its event, its processor call, its refusals) and gets its
// route, its ledger statement, its phase 1 (the charge `during`), its step and its phase 3.
//
// Its SQL names rows, never aliases: a declaration's fragments read `charge` (the charge as it
// is before the change) and `request` (the request's own columns), and the event's data reads
// `charge` after the change and `before`. The statements behind (transition-sql.ts) decide
// which alias each one is in which statement.
import { Type as t, type Static, type TObject, type TSchema } from "@sinclair/typebox";
import type Stripe from "stripe";
import type { EventType } from "./events.ts";
import { OPERATION_PROBLEMS, problemJson } from "../idempotency/problem-types.ts";
import { document422, problemsOf, refuseBy, type RefusalType } from "./refusals.ts";
import { mapCall, type ProcessorAdapter } from "./processor.ts";
import { checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { paymentView, payments, type PaymentView } from "./charge-steps.ts";
import { Charge, type ChargeStatus } from "./charges.ts";
import { foreign, PROCESSOR_REFUSALS, type ColumnValue, type FinalRow, type Fragment, type Operation, type SqlType, type StepContext, type StepResult } from "../idempotency/model.ts";
import { changePayment } from "./payment-change.ts";
import { columnOf, transitionSql, type At, type Rows } from "./transition-sql.ts";
import { idOf } from "./steps.ts";

export type { At, Rows };

export { problemType } from "../idempotency/problem-types.ts";

/** A check on the charge and the request, made by admit: the key stays unused when it refuses. */
export interface Check<M extends string = string> extends RefusalType {
  /** True: refused. */
  readonly when: (at: At<M>) => Fragment;
  /** The text the answer is made from (the admit's `detail`). */
  readonly detail: (at: At<M>) => Fragment;
  readonly answer: (chargeId: string, detail: string) => { readonly detail: string; readonly extensions?: Record<string, unknown> };
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
export type TransitionResume = Static<TObject<typeof Snapshot>> & Readonly<Record<string, unknown>>;

export interface Transition<B extends TObject, M extends string> {
  readonly name: string;
  readonly summary: string;
  readonly path: `/charges/:id/${string}`;
  readonly body: B;
  /** The request's own members: its column (snake case) in every statement, and in the resume. */
  readonly request?: Readonly<Record<M, { readonly type: SqlType; readonly schema: TSchema; readonly of: (body: Static<B>) => ColumnValue }>>;
  /** The fingerprint's fields beside the charge id. */
  readonly fingerprint?: (body: Static<B>) => Readonly<Record<string, string | number>>;
  readonly from: ChargeStatus;
  /** The charge's status while the processor is asked; `updating` when the change names none. */
  readonly during?: ChargeStatus;
  readonly to: ChargeStatus;
  /** The verb of the documentation and the details ("capture"), and the past participle ("captured"). */
  readonly verb: readonly [string, string];
  /**
   * The charge's columns the change sets beside its status, by the charge's member (its column
   * in snake case): in the ledger (of the charge and the request), and from the final resume.
   */
  readonly sets?: Readonly<Record<string, { readonly type: SqlType; readonly ledger: (at: At<M>) => Fragment; readonly final: (resume: TransitionResume) => number }>>;
  readonly event: { readonly type: EventType; readonly data: (rows: Rows) => Readonly<Record<string, Fragment>> };
  /** The resume's own members beside the request's (what the processor said). */
  readonly resume?: Readonly<Record<string, TSchema>>;
  readonly call: {
    /** The processor key's segment: `<charge id>:<key>:<attempt>`, its attempts counted in `<key>Attempt`. */
    readonly key: string;
    readonly send: (api: Stripe, resume: TransitionResume, idempotencyKey: string) => Promise<Stripe.PaymentIntent>;
    /** What the payment decides; undefined: the change is not made yet. */
    readonly decide: (payment: PaymentView, resume: TransitionResume) => StepResult<TransitionResume> | undefined;
  };
  /** `state`: the charge is not `from` (or has no payment at the processor); `processor`: its refusal, stored. */
  readonly refusals: { readonly state: RefusalType; readonly checks?: readonly Check<M>[]; readonly processor: RefusalType };
}

const chargeIdOf = (params: Readonly<Record<string, string>>): string => params.id!.toLowerCase();

export function chargeTransition<B extends TObject, M extends string = never>(d: Transition<B, M>): Operation<B> {
  const request: Readonly<Record<string, { readonly type: SqlType; readonly schema: TSchema; readonly of: (body: Static<B>) => ColumnValue }>> = d.request ?? {};
  const sets = d.sets ?? {};
  const checks = d.refusals.checks ?? [];
  const [verb, verbed] = d.verb;
  const columns = { charge_id: "uuid" as SqlType, ...Object.fromEntries(Object.entries(request).map(([m, c]) => [columnOf(m), c.type])) };
  const columnsOf = (params: Readonly<Record<string, string>>, body: Static<B>) => ({ charge_id: chargeIdOf(params), ...Object.fromEntries(Object.entries(request).map(([m, c]) => [columnOf(m), c.of(body)])) });
  const membersOf = (body: Static<B>) => Object.fromEntries(Object.entries(request).map(([m, c]) => [m, c.of(body)]));
  const attemptName = `${d.call.key}Attempt`;
  const Resume = t.Object({ ...Snapshot, ...Object.fromEntries(Object.entries(request).map(([m, c]) => [m, c.schema])), [attemptName]: t.Optional(t.Integer({ minimum: 0 })), ...d.resume });
  const capabilities = (p: ProcessorAdapter) => ({
    send: (r: TransitionResume, key: string) => mapCall(p.call("POST", (api) => d.call.send(api, r, key)), paymentView),
    retrieve: payments(p).retrieve,
  });
  const step = ({ resume, processor, resumed }: StepContext<TransitionResume, ReturnType<typeof capabilities>>) =>
    changePayment({
      resume,
      resumed,
      attemptName,
      send: (attempt) => processor.send(resume, `${resume.chargeId}:${d.call.key}:${attempt}`),
      read: () => processor.retrieve(resume.paymentId),
      decide: d.call.decide,
    });
  const final = (outcome: "succeeded" | "refused", resume: TransitionResume): FinalRow => {
    const { chargeId } = resume;
    const set = (value: (m: string) => ColumnValue) => Object.fromEntries(Object.keys(sets).map((m) => [columnOf(m), value(m)]));
    if (outcome === "succeeded") {
      const members = Object.fromEntries(Object.entries(sets).map(([m, s]) => [m, s.final(resume)]));
      const body = checkedJson(Charge, { id: chargeId, amountCents: resume.authorizedCents, currency: resume.currency, status: d.to, processorPaymentId: resume.paymentId, ...members, createdAt: resume.createdAt });
      return { response: { status: 200, body }, columns: { charge_id: chargeId, succeeded: true, ...set((m) => members[m]!) } };
    }
    const failureCode = resume.failureCode ?? "refused";
    const { problem } = d.refusals.processor;
    return {
      response: { status: problem.status, body: problemJson(problem, `the payment processor refused the ${verb} (${failureCode})`, { chargeId, failureCode }) },
      columns: { charge_id: chargeId, succeeded: false, ...set(() => null) },
    };
  };
  const { problem } = d.refusals.state;
  const refuse = refuseBy(d.name, {
    charge_not_found: { problem: OPERATION_PROBLEMS.notFound, answer: (id) => ({ detail: `no charge with id ${id}` }) },
    charge_not_in_state: { problem, answer: (id, status) => ({ detail: `charge ${id} is ${status}: only an authorized charge (capture: manual) can be ${verbed}`, extensions: { chargeStatus: status } }) },
    charge_not_at_processor: { problem, answer: (id) => ({ detail: `charge ${id} was authorized without the payment processor: it has no payment there to ${verb}` }) },
    ...Object.fromEntries(checks.map((c, i) => [`check_${i}`, { problem: c.problem, answer: (id: string, detail: string | null) => c.answer(id, detail ?? "") }])),
  });
  const statements = transitionSql({ from: d.from, during: d.during ?? "updating", to: d.to, checks: checks.map((c, i) => ({ reason: `check_${i}`, when: c.when, detail: c.detail })), sets, event: d.event });
  return {
    name: d.name,
    summary: d.summary,
    method: "POST",
    path: d.path,
    uuidParams: ["id"],
    body: d.body,
    response: Charge,
    status: 200,
    columns,
    fingerprint: ({ params, body }) => ({ chargeId: chargeIdOf(params), ...d.fingerprint?.(body) }),
    // The answer is the charge, made by the admit from its row.
    prepare: ({ params, body }) => ({ columns: columnsOf(params, body), body: "", exclusive: chargeIdOf(params) }),
    sql: statements.operation,
    refuse: (reason, detail, { params }) => refuse(reason, detail, chargeIdOf(params)),
    locationOf: (body) => `/charges/${idOf(body, "id")}`,
    problems: problemsOf([d.refusals.state, ...checks, d.refusals.processor]),
    refusals: {
      "404": "Unknown charge, or another tenant's; the key stays unused",
      "422": document422([d.refusals.state, ...checks], d.refusals.processor),
      ...PROCESSOR_REFUSALS,
    },
    foreign: foreign<Static<B>, TransitionResume, ReturnType<typeof capabilities>>({
      columns,
      validate: () => undefined,
      prepare: ({ params, body }, traceparent) => ({ columns: columnsOf(params, body), resume: { chargeId: chargeIdOf(params), ...membersOf(body), traceparent }, exclusive: chargeIdOf(params) }),
      resume: Resume,
      operatorIds: ["chargeId", "paymentId"],
      resolution: { succeeded: "paymentId", refused: "failureCode" },
      capabilities,
      firstPoint: "begun",
      steps: { begun: step },
      final,
      finishSql: statements.finish,
      exclusive: (resume) => resume.chargeId,
    }),
  };
}

// POST /charges/:id/refunds declared once: its route, its ledger statement and, through a
// processor, its phase 1 (the amount reserved, the refund pending), steps (refund-steps.ts) and
// phase 3 (the reservation made the refunded total, or released); and GET of a refund.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE, CHARGE_REFUNDED } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import { problemJson, problemType } from "../idempotency/problem-types.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../platform/schemas.ts";
import { admitOnCharge, chargeIdOf, documented, refuseBy, type Reason, type RefusalType } from "./existing-charge.ts";
import { foreign, type FinalRow, type Fragment, type Operation, type OperationInput } from "../idempotency/model.ts";
import { RefundResume, refundCalls, refundSteps, type RefundCalls } from "./refund-steps.ts";
import { idOf } from "./charges.ts";

export const RefundBody = t.Object({ amountCents: AmountCents("Amount to refund, in cents") }, { additionalProperties: false });

// POST /charges/:id/refunds' body (201) and GET /charges/:id/refunds/:refundId's (200).
export const Refund = t.Object(
  {
    id: t.String({ format: "uuid" }),
    chargeId: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
    status: t.Optional(
      t.Union([t.Literal("pending"), t.Literal("succeeded"), t.Literal("failed")], {
        description: "GET only: pending while the payment processor's refund is not known, then succeeded or failed",
      }),
    ),
  },
  { additionalProperties: false },
);

const EXCEEDS_CHARGE: RefusalType = {
  problem: problemType("refundExceedsCharge", "refund-exceeds-charge", "Refund exceeds what is left of the charge"),
  doc: "the refund is more than the charge has left",
  note: ", with leftCents",
};
const NOT_REFUNDABLE: RefusalType = { problem: problemType("chargeNotRefundable", "charge-not-refundable", "Charge not refundable"), doc: "the charge has not succeeded" };
const REFUND_REFUSED: RefusalType = { problem: problemType("refundRefused", "refund-refused", "Refund refused by the payment processor"), doc: "its refusal" };

const REASONS = {
  charge_not_refundable: { problem: NOT_REFUNDABLE.problem, answer: (id) => ({ detail: `charge ${id} has not succeeded (pending or declined): there is nothing to refund` }) },
  charge_not_at_processor: { problem: NOT_REFUNDABLE.problem, answer: (id) => ({ detail: `charge ${id} was taken without the payment processor: it has no payment there to refund` }) },
  refund_exceeds_charge: { problem: EXCEEDS_CHARGE.problem, answer: (id, left) => ({ detail: `charge ${id} has ${Number(left)} cents left to refund`, extensions: { leftCents: Number(left) } }) },
} satisfies Record<string, Reason>;
const reason = (name: keyof typeof REASONS | "charge_not_found"): string => name;

/** Phase 3 as values: the response to store, and what the refund's row and its charge's get. */
function final(outcome: "succeeded" | "refused", resume: RefundResume): FinalRow {
  const { refundId, chargeId, amountCents } = resume;
  const columns = { refund_id: refundId, charge_id: chargeId, amount_cents: amountCents, succeeded: outcome === "succeeded", processor_refund_id: resume.processorRefundId ?? null };
  if (outcome === "succeeded") {
    return { response: { status: 201, body: checkedJson(Refund, { id: refundId, chargeId, amountCents, createdAt: resume.createdAt }) }, columns: { ...columns, failure_code: null } };
  }
  const failureCode = resume.failureCode ?? "refused";
  return {
    response: {
      status: REFUND_REFUSED.problem.status,
      body: problemJson(REFUND_REFUSED.problem, `the payment processor refused the refund (${failureCode})`, { chargeId, refundId, failureCode }),
    },
    columns: { ...columns, failure_code: failureCode },
  };
}

type RefundColumns = { refund_id: string; charge_id: string; amount_cents: number; created_at: string };

/** A new refund, the same in both modes (its createdAt in the resume too: phase 3 answers without a read). */
function newRefund({ params, body }: OperationInput<Static<typeof RefundBody>>) {
  const id = crypto.randomUUID();
  const chargeId = chargeIdOf(params);
  const createdAt = new Date().toISOString();
  const columns = { refund_id: id, charge_id: chargeId, amount_cents: body.amountCents, created_at: createdAt };
  return { refund: { id, chargeId, amountCents: body.amountCents, createdAt }, columns };
}

export const createRefund: Operation<typeof RefundBody, RefundColumns> = {
  name: "createRefund",
  summary: "Refund part or all of a charge",
  method: "POST",
  path: "/charges/:id/refunds",
  uuidParams: ["id"],
  body: RefundBody,
  response: Refund,
  status: 201,
  columns: { refund_id: "uuid", charge_id: "uuid", amount_cents: "int", created_at: "timestamptz" },
  // The key's scope is the route template, so the charge must be part of "the same request".
  fingerprint: ({ params, body }) => ({ chargeId: chargeIdOf(params), amountCents: body.amountCents }),
  prepare(input) {
    const { refund, columns } = newRefund(input);
    return { columns, body: checkedJson(Refund, refund), exclusive: refund.chargeId };
  },
  // FOR UPDATE (admitOnCharge) waits for a refund in flight and then sees its total, so what is
  // left (of what was captured, less the refunds pending at the processor) is exact until the
  // commit; the check constraint on charges is the last guard. last_sequence numbers events under
  // the same lock, so sequences follow commit order.
  sql: (sql, mode) => ({
    admit: admitOnCharge(
      sql,
      sql`c.id, c.tenant, c.status, c.processor_payment_id,
               coalesce(c.captured_cents, c.amount_cents) - c.refunded_cents - c.pending_refund_cents as left_cents`,
      sql`case when t.id is null then ${reason("charge_not_found")}::text
                    when t.status <> 'succeeded' then ${reason("charge_not_refundable")}::text
                    when ${mode === "processor"} and t.processor_payment_id is null then ${reason("charge_not_at_processor")}::text
                    when r.amount_cents > t.left_cents then ${reason("refund_exceeds_charge")}::text end as refusal,
               t.left_cents::text as detail,
               jsonb_build_object('paymentId', t.processor_payment_id) as resume,
               null::text as answer`,
    ),
    write:
      mode === "ledger"
        ? sql`
      debit as (
        update charges c
           set refunded_cents = c.refunded_cents + w.amount_cents, last_sequence = c.last_sequence + 1
          from won w
         where c.id = w.charge_id
        returning w.n, c.id, c.refunded_cents, c.last_sequence
      ),
      refund as (
        insert into refunds (id, charge_id, tenant, amount_cents, created_at)
        select w.refund_id, w.charge_id, w.tenant, w.amount_cents, w.created_at from won w join debit d on d.n = w.n
        returning id
      ),
      events as (
        select d.n, ${CHARGE}::text as aggregate_type, d.id as aggregate_id, d.last_sequence as sequence,
               ${CHARGE_REFUNDED}::text as event_type,
               ${chargeRefundedPayload(sql, "d")} as payload
          from debit d join won w on w.n = d.n join refund f on f.id = w.refund_id
      )`
        : sql`
      reserve as (
        update charges c set pending_refund_cents = c.pending_refund_cents + w.amount_cents
          from won w
         where c.id = w.charge_id
        returning w.n
      ),
      refund as (
        insert into refunds (id, charge_id, tenant, amount_cents, created_at, status)
        select w.refund_id, w.charge_id, w.tenant, w.amount_cents, w.created_at, 'pending' from won w join reserve d on d.n = w.n
        returning id
      ),
      begun as (select w.n from won w join refund f on f.id = w.refund_id)`,
  }),
  refuse: refuseBy("createRefund", REASONS),
  locationOf: (body) => `/charges/${idOf(body, "chargeId")}/refunds/${idOf(body, "id")}`,
  ...documented([EXCEEDS_CHARGE, NOT_REFUNDABLE], REFUND_REFUSED),
  foreign: foreign<Static<typeof RefundBody>, RefundResume, RefundCalls>({
    columns: { refund_id: "uuid", charge_id: "uuid", amount_cents: "int", created_at: "timestamptz" },
    validate: () => undefined,
    prepare(input, traceparent) {
      const { refund: { id: refundId, ...refund }, columns } = newRefund(input);
      return {
        columns,
        resume: { refundId, ...refund, traceparent },
        // Two reservations of one charge in one statement would write its row once (UPDATE … FROM).
        exclusive: refund.chargeId,
      };
    },
    resume: RefundResume,
    operatorIds: ["refundId", "chargeId", "paymentId", "processorRefundId"],
    resolution: { succeeded: "processorRefundId", refused: "failureCode" },
    capabilities: refundCalls,
    firstPoint: "begun",
    steps: refundSteps,
    final,
    // The reservation turned into the refunded total (with ChargeRefunded at the charge's next
    // sequence) or released. Charges lock first and in id order, as every refund statement
    // locks them: one lock order, no deadlock.
    finishSql: (sql: Sql) => ({
      columns: { refund_id: "uuid", charge_id: "uuid", amount_cents: "int", succeeded: "boolean", processor_refund_id: "text", failure_code: "text" },
      write: sql`
      locked as (
        select c.id from charges c
         where c.id in (select w.charge_id from won w)
         order by c.id
           for update
      ),
      settle as (
        update charges c
           set refunded_cents = c.refunded_cents + case when w.succeeded then w.amount_cents else 0 end,
               pending_refund_cents = c.pending_refund_cents - w.amount_cents,
               last_sequence = c.last_sequence + case when w.succeeded then 1 else 0 end
          from won w join locked l on l.id = w.charge_id
         where c.id = w.charge_id and c.tenant = w.tenant
        returning w.n, c.refunded_cents, c.last_sequence
      ),
      refund as (
        update refunds f
           set status = case when w.succeeded then 'succeeded' else 'failed' end,
               processor_refund_id = w.processor_refund_id, failure_code = w.failure_code
          from won w
         where f.id = w.refund_id and f.status = 'pending'
        returning w.n
      ),
      events as (
        select s.n, ${CHARGE}::text as aggregate_type, w.charge_id as aggregate_id, s.last_sequence as sequence,
               ${CHARGE_REFUNDED}::text as event_type,
               ${chargeRefundedPayload(sql, "s")} as payload
          from settle s join won w on w.n = s.n join refund f on f.n = s.n
         where w.succeeded
      )`,
    }),
    exclusive: (resume) => resume.chargeId,
  }),
};

interface RefundRow {
  readonly id: string;
  readonly charge_id: string;
  readonly amount_cents: number;
  readonly created_at: Date;
  readonly status: "pending" | "succeeded" | "failed";
}

/** A refund of the tenant's charge; another tenant's or charge's is not found. */
export async function refundView(sql: Sql, tenant: string, chargeId: string, refundId: string, endsAt: number): Promise<string | undefined> {
  const [row] = await boundedStatement(sql, endsAt, (q) => q<RefundRow[]>`
    select id, charge_id, amount_cents, created_at, status
      from refunds
     where id = ${refundId}::uuid and charge_id = ${chargeId}::uuid and tenant = ${tenant}`);
  if (!row) return undefined;
  return checkedJson(Refund, { id: row.id, chargeId: row.charge_id, amountCents: row.amount_cents, createdAt: row.created_at.toISOString(), status: row.status });
}

/**
 * A ChargeRefunded event's data, from the request row `w` and the charge's new refunded_cents in
 * the CTE `settled`: one expression, so the ledger's and the processor's events carry the same bytes.
 */
function chargeRefundedPayload(sql: Sql, settled: string): Fragment {
  return sql`json_build_object('chargeId', w.charge_id, 'refundId', w.refund_id,
                               'amountCents', w.amount_cents, 'refundedCents', ${sql(settled)}.refunded_cents)::text`;
}

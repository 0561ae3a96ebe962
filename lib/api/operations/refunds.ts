// POST /charges/:id/refunds on the idempotency core, and GET /charges/:id/refunds/:refundId.
import { Type as t, type Static } from "@sinclair/typebox";
import { CHARGE, CHARGE_REFUNDED } from "../../events.ts";
import type { Sql } from "../../shared/db.ts";
import { boundedStatement } from "../../shared/bounded-statement.ts";
import { refundProcess } from "../../shared/processor/refund.ts";
import { chargeRefundedPayload } from "../../shared/outbox-insert.ts";
import type { ForeignDeclaration, Operation } from "../core/operation.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../schemas.ts";
import { idOf } from "./charges.ts";

export const RefundBody = t.Object({ amountCents: AmountCents("Amount to refund, in cents") }, { additionalProperties: false });

// The body of POST /charges/:id/refunds (201) and GET /charges/:id/refunds/:refundId (200).
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

type RefundColumns = { refund_id: string; charge_id: string; amount_cents: number; created_at: string };

// admit's refusals.
const CHARGE_NOT_FOUND = "charge_not_found";
const EXCEEDS_CHARGE = "refund_exceeds_charge";
const NOT_REFUNDABLE = "charge_not_refundable";
const NOT_AT_PROCESSOR = "charge_not_at_processor";

// Through a processor: phase 1 reserves the amount against the charge (pending_refund_cents,
// under the same row lock and check as the single statement's debit) and writes the refund
// pending; the steps and phase 3 are refundProcess's. The charge's payment at the processor
// goes into the key's resume from the admit.
const foreignRefund: ForeignDeclaration<Static<typeof RefundBody>> = {
  process: refundProcess,
  columns: { refund_id: "uuid", charge_id: "uuid", amount_cents: "int", created_at: "timestamptz" },
  validate: () => undefined,
  prepare({ params, body }, traceparent) {
    const refundId = crypto.randomUUID();
    const chargeId = chargeIdOf(params);
    // In the resume too: phase 3 answers with it without reading the refund back.
    const createdAt = new Date().toISOString();
    return {
      columns: { refund_id: refundId, charge_id: chargeId, amount_cents: body.amountCents, created_at: createdAt },
      resume: { refundId, chargeId, amountCents: body.amountCents, createdAt, traceparent },
      // Two reservations of one charge in one statement would write its row once (UPDATE … FROM).
      exclusive: chargeId,
    };
  },
  sql: (sql) => ({
    admit: sql`
      ${target(sql)},
      admit as (
        select l.n,
               -- A charge the ledger took without a processor (before PAYMENT_PROCESSOR=stripe)
               -- has no payment there to refund.
               case when t.id is not null and t.status = 'succeeded' and t.processor_payment_id is null
                    then ${NOT_AT_PROCESSOR}::text else ${refusal(sql)} end as refusal,
               t.left_cents::text as detail,
               jsonb_build_object('paymentId', t.processor_payment_id) as resume
          from lock l
          join req r on r.n = l.n
          left join target t on t.id = r.charge_id and t.tenant = r.tenant
         where l.got
      )`,
    begin: sql`
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
};

// The charge rows of the requests that got their lock, locked in id order (see the admit below).
// What is left counts the refunds still pending at the processor: they are reserved.
const target = (sql: Parameters<Operation["sql"]>[0]) => sql`
      target as (
        select c.id, c.tenant, c.status, c.processor_payment_id, c.amount_cents - c.refunded_cents - c.pending_refund_cents as left_cents
          from charges c
         where (c.id, c.tenant) in (select r.charge_id, r.tenant from req r join lock l on l.n = r.n where l.got)
         order by c.id
           for update
      )`;

const refusal = (sql: Parameters<Operation["sql"]>[0]) => sql`
  case when t.id is null then ${CHARGE_NOT_FOUND}::text
       when t.status <> 'succeeded' then ${NOT_REFUNDABLE}::text
       when r.amount_cents > t.left_cents then ${EXCEEDS_CHARGE}::text end`;

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
  prepare({ params, body }) {
    const id = crypto.randomUUID();
    const chargeId = chargeIdOf(params);
    const createdAt = new Date().toISOString();
    return {
      columns: { refund_id: id, charge_id: chargeId, amount_cents: body.amountCents, created_at: createdAt },
      body: checkedJson(Refund, { id, chargeId, amountCents: body.amountCents, createdAt }),
      exclusive: chargeId,
    };
  },
  // The charge row is locked (in id order, so that two statements locking several charges
  // cannot deadlock) and read as committed now, not as of the statement's snapshot: SELECT …
  // FOR UPDATE waits for a refund in flight and then sees its total. So what is left to refund
  // is exact until the commit, whatever runs beside it (another API process, another batch,
  // a resend), and the update below cannot take the total past the amount; the check
  // constraint on charges is the last guard. The charge's last_sequence numbers its events
  // under the same lock, so sequences follow commit order.
  sql: (sql) => ({
    admit: sql`
      ${target(sql)},
      admit as (
        select l.n, ${refusal(sql)} as refusal, t.left_cents::text as detail
          from lock l
          join req r on r.n = l.n
          left join target t on t.id = r.charge_id and t.tenant = r.tenant
         where l.got
      )`,
    write: sql`
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
      )`,
  }),
  refuse(reason, detail, { params }) {
    const chargeId = chargeIdOf(params);
    if (reason === CHARGE_NOT_FOUND) return { problem: "notFound", detail: `no charge with id ${chargeId}` };
    if (reason === NOT_REFUNDABLE) return { problem: "chargeNotRefundable", detail: `charge ${chargeId} has not succeeded (pending or declined): there is nothing to refund` };
    if (reason === NOT_AT_PROCESSOR) return { problem: "chargeNotRefundable", detail: `charge ${chargeId} was taken without the payment processor: it has no payment there to refund` };
    if (reason === EXCEEDS_CHARGE) {
      const leftCents = Number(detail);
      return { problem: "refundExceedsCharge", detail: `charge ${chargeId} has ${leftCents} cents left to refund`, extensions: { leftCents } };
    }
    throw new Error(`bug: createRefund refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "chargeId")}/refunds/${idOf(body, "id")}`,
  refusals: {
    "404": "Unknown charge, or another tenant's; the key stays unused",
    "422": "The key was used with another request (idempotency-key-reused), the refund is more than the charge has left (refund-exceeds-charge, with leftCents), or the charge has not succeeded (charge-not-refundable); the key stays unused for the latter two. With a processor, also its refusal (refund-refused), stored under the key",
    "502": "The processor answered with an error: outcome unknown, nothing stored; retry with the same key (Retry-After)",
    "503": "Database unavailable, or the token's signing keys could not be fetched; with a payment processor, also the processor unreachable (outcome unknown, nothing stored; retry with the same key). Retry-After",
    "504": "The processor did not answer in time: outcome unknown, nothing stored; retry with the same key (Retry-After)",
  },
  foreign: foreignRefund,
};

/** The charge id of the route, lowercased: a UUID's case never makes another charge or another fingerprint. */
function chargeIdOf(params: Readonly<Record<string, string>>): string {
  const id = params.id;
  if (id === undefined) throw new Error("bug: a refund route without a charge id");
  return id.toLowerCase();
}

interface RefundRow {
  readonly id: string;
  readonly charge_id: string;
  readonly amount_cents: number;
  readonly created_at: Date;
  readonly status: "pending" | "succeeded" | "failed";
}

/** A refund of the tenant's charge; another tenant's, or another charge's, is not found. */
export async function refundView(sql: Sql, tenant: string, chargeId: string, refundId: string, endsAt: number): Promise<string | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<RefundRow[]>`
    select id, charge_id, amount_cents, created_at, status
      from refunds
     where id = ${refundId}::uuid and charge_id = ${chargeId}::uuid and tenant = ${tenant}`);
  const row = rows[0];
  if (!row) return undefined;
  return checkedJson(Refund, { id: row.id, chargeId: row.charge_id, amountCents: row.amount_cents, createdAt: row.created_at.toISOString(), status: row.status });
}

// POST /charges on the idempotency core, and GET /charges/:id.
import { Type as t } from "@sinclair/typebox";
import { CHARGE, CHARGE_CREATED, chargeCreatedPayload } from "../../events.ts";
import type { Sql } from "../../shared/db.ts";
import { boundedStatement } from "../../shared/bounded-statement.ts";
import type { Operation } from "../core/operation.ts";
import { AmountCents, checkedJson, MAX_AMOUNT_CENTS } from "../schemas.ts";

export const ChargeBody = t.Object({ amountCents: AmountCents("Amount in cents") }, { additionalProperties: false });

// The body of POST /charges (201), stored under the key and replayed byte for byte.
export const Charge = t.Object(
  {
    id: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

// GET /charges/:id: the charge as it is now, with what has been refunded of it.
export const ChargeView = t.Object(
  {
    id: t.String({ format: "uuid" }),
    amountCents: t.Integer({ minimum: 1, maximum: MAX_AMOUNT_CENTS }),
    refundedCents: t.Integer({ minimum: 0, maximum: MAX_AMOUNT_CENTS }),
    createdAt: t.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

type ChargeColumns = { charge_id: string; amount_cents: number; created_at: string; payload: string };

export const createCharge: Operation<typeof ChargeBody, ChargeColumns> = {
  name: "createCharge",
  summary: "Create a charge",
  method: "POST",
  path: "/charges",
  uuidParams: [],
  body: ChargeBody,
  response: Charge,
  status: 201,
  columns: { charge_id: "uuid", amount_cents: "int", created_at: "timestamptz", payload: "text" },
  fingerprint: ({ body }) => ({ amountCents: body.amountCents }),
  prepare({ body }) {
    const id = crypto.randomUUID();
    const createdAt = new Date().toISOString();
    return {
      columns: { charge_id: id, amount_cents: body.amountCents, created_at: createdAt, payload: chargeCreatedPayload({ chargeId: id, amountCents: body.amountCents }) },
      body: checkedJson(Charge, { id, amountCents: body.amountCents, createdAt }),
    };
  },
  // A new charge has nothing to check: every request that got its lock goes ahead. Its event
  // is the charge's first: sequence 1.
  sql: (sql) => ({
    admit: sql`admit as (select l.n, null::text as refusal, null::text as detail from lock l where l.got)`,
    write: sql`
      charge as (
        insert into charges (id, tenant, amount_cents, created_at)
        select w.charge_id, w.tenant, w.amount_cents, w.created_at from won w
        returning id
      ),
      events as (
        select w.n, ${CHARGE}::text as aggregate_type, c.id as aggregate_id, 1 as sequence, ${CHARGE_CREATED}::text as event_type, w.payload
          from charge c join won w on w.charge_id = c.id
      )`,
  }),
  refuse: (reason) => {
    throw new Error(`bug: createCharge refused with ${reason}`);
  },
  locationOf: (body) => `/charges/${idOf(body, "id")}`,
  refusals: {},
};

/** A string member of a stored response body (the ids its Location is built from). */
export function idOf(body: string, member: string): string {
  const parsed: unknown = JSON.parse(body);
  const value = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>)[member] : undefined;
  if (typeof value === "string") return value;
  throw new Error(`bug: a stored response has no ${member}`);
}

interface ChargeRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly refunded_cents: number;
  readonly created_at: Date;
}

/** Another tenant's charge is not found, exactly like an unknown id. */
export async function findCharge(sql: Sql, tenant: string, id: string, endsAt: number): Promise<ChargeRow | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<ChargeRow[]>`
    select id, amount_cents, refunded_cents, created_at from charges where id = ${id}::uuid and tenant = ${tenant}`);
  return rows[0];
}

/** GET /charges/:id's body, or undefined when there is no such charge for the tenant. */
export async function chargeView(sql: Sql, tenant: string, id: string, endsAt: number): Promise<string | undefined> {
  const row = await findCharge(sql, tenant, id, endsAt);
  if (!row) return undefined;
  return checkedJson(ChargeView, { id: row.id, amountCents: row.amount_cents, refundedCents: row.refunded_cents, createdAt: row.created_at.toISOString() });
}

// The statements of a change of an authorized charge (transition.ts). Only this file knows the row
// aliases (`t` locked charge, `r`/`w` request, `c`/`p` charge updated, `b` before) behind the names.
import { CHARGE } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import type { Fragment, Mode, OperationSql, FinishSql } from "../idempotency/model.ts";
import { admitOnCharge } from "./existing-charge.ts";

type ChargeMember = "id" | "tenant" | "amountCents" | "currency" | "status" | "processorPaymentId" | "capturedCents" | "refundedCents" | "lastSequence" | "createdAt";

type Row<M extends string> = Readonly<Record<M, Fragment>>;

/** What a declaration's SQL reads: the charge before the change, and the request's own members. */
export type At<M extends string = string> = { sql: Sql; charge: Row<ChargeMember>; request: Row<M> };

/** What an event's data reads: the charge after the change and before it. */
export type Rows = Omit<At, "request"> & { readonly before: Row<ChargeMember> };

const NAME = /^[a-z][a-zA-Z0-9_]*$/;

export const columnOf = (member: string): string => member.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** The columns of the row a statement calls `alias`, by member (names from lib/, never a request). */
function rowOf<M extends string>(sql: Sql, alias: string): Row<M> {
  return new Proxy({} as Row<M>, {
    get: (_, member) => {
      if (typeof member !== "string" || !NAME.test(member)) throw new Error(`bug: a declaration names column ${String(member)}`);
      return sql(`${alias}.${columnOf(member)}`) as unknown as Fragment;
    },
  });
}

interface TransitionShape {
  readonly from: string;
  readonly during: string;
  readonly to: string;
  readonly checks: readonly { readonly reason: string; readonly when: (at: At) => Fragment }[];
  /** Amounts: int columns. */
  readonly sets: Readonly<Record<string, { readonly ledger: (at: At) => Fragment }>>;
  readonly event: { readonly type: string; readonly data: (rows: Rows) => Readonly<Record<string, Fragment>> };
}

function list(sql: Sql, parts: readonly Fragment[], separator: string): Fragment {
  return parts.reduce((all, part, i) => (i === 0 ? part : sql`${all}${sql.unsafe(separator)}${part}`), sql``);
}

const setsOf = (s: TransitionShape) => Object.entries(s.sets).map(([member, set]) => ({ member, column: columnOf(member), ...set }));

function eventsSql(sql: Sql, s: TransitionShape, from: Fragment, where: Fragment): Fragment {
  const data = s.event.data({ sql, charge: rowOf(sql, "p"), before: rowOf(sql, "b") });
  const members = Object.entries(data).map(([name, value]) => {
    if (!NAME.test(name)) throw new Error(`bug: an event's data names ${name}`);
    return sql`${sql.unsafe(`'${name}'`)}, ${value}`;
  });
  return sql`
      events as (
        select p.n, ${CHARGE}::text as aggregate_type, p.id as aggregate_id, p.last_sequence as sequence,
               ${s.event.type}::text as event_type, json_build_object(${list(sql, members, ", ")})::text as payload
          from p join ${from} b on b.id = p.id${where}
      )`;
}

function admitSql(sql: Sql, s: TransitionShape, mode: Mode): Fragment {
  const at: At = { sql, charge: rowOf(sql, "t"), request: rowOf(sql, "r") };
  const refusals = s.checks.map((c) => sql` when ${c.when(at)} then ${c.reason}::text`);
  const details = s.checks.map((c) => sql` when ${c.when(at)} then ${at.charge.amountCents}::text`);
  const answer = chargeAnswerSql(sql, s.to, Object.fromEntries(setsOf(s).map((x) => [x.member, x.ledger(at)])));
  return admitOnCharge(
    sql,
    sql`c.*`,
    sql`case when t.id is null then 'charge_not_found'::text
                  when t.status <> ${s.from}::text then 'charge_not_in_state'::text
                  when ${mode === "processor"} and t.processor_payment_id is null then 'charge_not_at_processor'::text${list(sql, refusals, "")} end as refusal,
             case when t.status <> ${s.from}::text then t.status${list(sql, details, "")} end as detail,
             jsonb_build_object('paymentId', t.processor_payment_id, 'authorizedCents', t.amount_cents, 'currency', t.currency,
                                'createdAt', to_char(t.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) as resume,
             ${answer} as answer`,
  );
}

function writeSql(sql: Sql, s: TransitionShape, mode: Mode): Fragment {
  if (mode === "processor") {
    return sql`
      mark as (
        update charges c set status = ${s.during}::text from won w where c.id = w.charge_id
        returning w.n
      ),
      begun as (select n from mark)`;
  }
  const at: At = { sql, charge: rowOf(sql, "c"), request: rowOf(sql, "w") };
  const set = setsOf(s).map((x) => sql`, ${sql(x.column)} = ${x.ledger(at)}`);
  return sql`
      p as (
        update charges c
           set status = ${s.to}::text${list(sql, set, "")}, last_sequence = c.last_sequence + 1
          from won w
         where c.id = w.charge_id
        returning w.n, c.*
      ),${eventsSql(sql, s, sql`target`, sql``)}`;
}

// Phase 3: a refused key's charge goes back to `from`, no event. `prior`, the statement's snapshot, is
// the charge before: nothing but this key's holder changes it while it is `during`.
function finishSql(sql: Sql, s: TransitionShape): FinishSql {
  const sets = setsOf(s);
  const set = sets.map((x) => sql`, ${sql(x.column)} = case when w.succeeded then ${sql(`w.${x.column}`)} else ${sql(`c.${x.column}`)} end`);
  return {
    columns: { charge_id: "uuid", succeeded: "boolean", ...Object.fromEntries(sets.map((x) => [x.column, "int" as const])) },
    write: sql`
      prior as (
        select c.* from charges c join won w on w.charge_id = c.id and w.tenant = c.tenant
      ),
      p as (
        update charges c
           set status = case when w.succeeded then ${s.to}::text else ${s.from}::text end${list(sql, set, "")},
               last_sequence = c.last_sequence + case when w.succeeded then 1 else 0 end
          from won w
         where c.id = w.charge_id and c.tenant = w.tenant and c.status = ${s.during}::text
        returning w.n, c.*, w.succeeded
      ),${eventsSql(sql, s, sql`prior`, sql` where p.succeeded`)}`,
  };
}

export function transitionSql(s: TransitionShape): { operation: (sql: Sql, mode: Mode) => OperationSql; finish: (sql: Sql) => FinishSql } {
  return {
    operation: (sql, mode) => ({ admit: admitSql(sql, s, mode), write: writeSql(sql, s, mode) }),
    finish: (sql) => finishSql(sql, s),
  };
}

/** A charge's JSON from the row `t`, byte for byte as Charge's schema writes it. */
function chargeAnswerSql(sql: Sql, status: string, members: Readonly<Record<string, Fragment>>): Fragment {
  const { amountCents, capturedCents, ...others } = members;
  if (Object.keys(others).length > 0) throw new Error(`bug: a charge's answer has no member ${Object.keys(others).join(", ")}`);
  return sql`'{"id":' || to_json(t.id)::text || ',"amountCents":' || ${amountCents ?? sql`t.amount_cents`} || ',"currency":' || to_json(t.currency)::text
    || ',"status":' || to_json(${status}::text)::text
    || case when t.processor_payment_id is null then '' else ',"processorPaymentId":' || to_json(t.processor_payment_id)::text end
    ${capturedCents === undefined ? sql`` : sql`|| ',"capturedCents":' || (${capturedCents})`}
    || ',"createdAt":' || to_json(to_char(t.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text || '}'`;
}

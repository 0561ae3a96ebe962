// The SQL of the operations on an existing charge (refunds, capture, cancel), written once:
// the admit that locks the request's charge, and the change of an authorized charge that
// capture and cancel make in each of their three statements.
import { CHARGE } from "./events.ts";
import type { Sql } from "../platform/db.ts";
import type { Fragment, Mode } from "../idempotency/model.ts";

/**
 * An operation's admit on the charge its requests name (`req.charge_id`): `target`, those
 * charges of the requests' tenants (`select`: its columns of `c`), and `admit`, each request
 * that got its key's lock beside its charge (`t`, null when there is no such charge; `checks`:
 * admit's columns after `n`). The charges are locked in id order, so that two statements
 * locking several charges cannot deadlock, and read as committed now, not as of the
 * statement's snapshot: FOR UPDATE waits for a change of the charge in flight and then sees
 * it, so what admit checks holds until the commit.
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

/**
 * What a change of an authorized charge (capture, cancel) writes, as the operation says it in
 * SQL: its statuses are literals (sql`'succeeded'`), its columns expressions of the charge `c`
 * and the request or key `w`.
 */
export interface ChargeChange {
  /** The charge's status while the processor is asked (phase 1 to phase 3): 'capturing'. */
  readonly during: Fragment;
  /** The charge's status once changed: 'succeeded'. */
  readonly done: Fragment;
  /** A column the change sets beside the status: its value in the ledger, and in phase 3 when the processor changed the payment. */
  readonly also?: { readonly column: Fragment; readonly ledger: Fragment; readonly finish: Fragment };
  readonly eventType: string;
  /** The event's data from the changed row `p` (its id, and `also`'s column). */
  readonly payload: Fragment;
}

/**
 * The change's writes in `statement`. The ledger: `p`, the charge `done` (its `also` set) at
 * its next sequence, and its event there (`events`). Phase 1: the charge marked `during`
 * (`begun`). Phase 3: the same as the ledger for the keys whose step succeeded; a refused
 * one's charge authorized again, its sequence kept and no event; a charge no longer `during`
 * is left as it is.
 */
export function chargeChange(sql: Sql, change: ChargeChange, statement: Mode | "finish"): Fragment {
  if (statement === "processor") {
    return sql`
      mark as (
        update charges c set status = ${change.during} from won w where c.id = w.charge_id
        returning w.n
      ),
      begun as (select n from mark)`;
  }
  const finish = statement === "finish";
  const { also } = change;
  const status = finish ? sql`case when w.succeeded then ${change.done} else 'authorized' end` : change.done;
  const alsoSet =
    also === undefined ? sql``
    : finish ? sql`, ${also.column} = case when w.succeeded then ${also.finish} else c.${also.column} end`
    : sql`, ${also.column} = ${also.ledger}`;
  const step = finish ? sql`case when w.succeeded then 1 else 0 end` : sql`1`;
  return sql`
      p as (
        update charges c
           set status = ${status}${alsoSet},
               last_sequence = c.last_sequence + ${step}
          from won w
         where c.id = w.charge_id${finish ? sql` and c.tenant = w.tenant and c.status = ${change.during}` : sql``}
        returning w.n, c.id, ${also === undefined ? sql`` : sql`c.${also.column}, `}c.last_sequence${finish ? sql`, w.succeeded` : sql``}
      ),
      events as (
        select p.n, ${CHARGE}::text as aggregate_type, p.id as aggregate_id, p.last_sequence as sequence,
               ${change.eventType}::text as event_type, ${change.payload} as payload
          from p${finish ? sql` where p.succeeded` : sql``}
      )`;
}

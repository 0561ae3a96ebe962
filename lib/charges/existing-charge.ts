// The admit of the operations on an existing charge (refunds, and every change of an authorized
// charge: transition-sql.ts), written once: it locks the request's charge.
import type { Sql } from "../platform/db.ts";
import type { Fragment } from "../idempotency/model.ts";

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

// The admit of the operations on an existing charge (refunds, and every change of an authorized
// charge: transition-sql.ts), written once: it locks the request's charge.
import type { Sql } from "../platform/db.ts";
import type { Fragment } from "../idempotency/model.ts";

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

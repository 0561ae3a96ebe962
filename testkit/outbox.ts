// Outbox rows for the relay and subscriber tests, written the way the API writes them,
// and what the outbox says afterwards.
import { CHARGE_CREATED, chargeCreatedPayload, newEventId } from "../lib/events.ts";
import type { Sql } from "../lib/shared/db.ts";

export interface PendingRow {
  readonly id: string;
  readonly aggregateId: string;
  readonly amountCents: number;
  /** created_at as Postgres renders it in ISO-8601 UTC with microseconds. */
  readonly createdAt: string;
}

/**
 * Inserts `count` charges with their outbox rows, created_at one millisecond apart (oldest
 * first), all in one transaction as of `start`. Returns them oldest first.
 */
export async function insertPending(sql: Sql, count: number, options: { traceparent?: string } = {}): Promise<PendingRow[]> {
  // Event ids as the API makes them (time-ordered), increasing with created_at.
  const eventIds = Array.from({ length: count }, newEventId);
  const rows = await sql<PendingRow[]>`
    with c as (
      insert into charges (id, amount_cents, created_at)
      select gen_random_uuid(), 100 + i, now() - make_interval(secs => (${count} - i) / 1000.0)
      from generate_series(1, ${count}) as i
      returning id, amount_cents, created_at
    )
    insert into outbox (id, aggregate_id, event_type, payload, created_at, traceparent)
    select e.id, c.id, ${CHARGE_CREATED},
           json_build_object('chargeId', c.id, 'amountCents', c.amount_cents)::text, c.created_at,
           ${options.traceparent ?? null}::text
    from (select c.*, row_number() over (order by c.created_at) as n from c) as c
    join unnest(${eventIds}::uuid[]) with ordinality as e(id, n) using (n)
    returning id, aggregate_id as "aggregateId", (payload::json->>'amountCents')::int as "amountCents",
              to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"`;
  return [...rows].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

/** One charge and its outbox row in one transaction, as the API writes them. */
export async function insertCharge(sql: Sql): Promise<PendingRow> {
  const chargeId = crypto.randomUUID();
  const id = newEventId();
  const amountCents = 4900;
  const [row] = await sql.begin(async (tx) => {
    await tx`insert into charges (id, amount_cents) values (${chargeId}, ${amountCents})`;
    return tx<{ createdAt: string }[]>`
      insert into outbox (id, aggregate_id, event_type, payload)
      values (${id}, ${chargeId}, ${CHARGE_CREATED}, ${chargeCreatedPayload({ chargeId, amountCents })})
      returning to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"`;
  });
  return { id, aggregateId: chargeId, amountCents, createdAt: row?.createdAt ?? "" };
}

export async function countWhere(sql: Sql, what: "published" | "pending" | "attempted" | "parked"): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*) filter (where published_at is not null)::int as published,
           count(*) filter (where published_at is null)::int as pending,
           count(*) filter (where attempts > 0)::int as attempted,
           count(*) filter (where parked_at is not null)::int as parked
    from outbox`;
  return Number((row as unknown as Record<string, number> | undefined)?.[what] ?? 0);
}

// Outbox rows for the relay and subscriber tests, written the way the API writes them,
// and what the outbox says afterwards.
import { CHARGE_CREATED, chargeCreatedPayload } from "../lib/charges/events.ts";
import { newEventId } from "../lib/platform/uuid.ts";
import type { Sql } from "../lib/platform/db.ts";

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

export interface Chain {
  readonly aggregateId: string;
  /** The event ids in sequence order: [0] is the ChargeCreated (sequence 1). */
  readonly events: readonly string[];
}

/**
 * Inserts `charges` charges, each with a ChargeCreated and `refundsEach` ChargeRefunded outbox
 * rows (sequence 1, 2, 3, …), as a backlog. With `createdAt: "reversed"` each charge's later
 * events get OLDER created_at values (a refund whose transaction started before its
 * predecessor's and waited on the charge's row lock): the claim must follow the sequence,
 * not created_at. Rows of different charges interleave in created_at either way.
 */
export async function insertChains(sql: Sql, charges: number, refundsEach: number, options: { createdAt?: "ordered" | "reversed" } = {}): Promise<Chain[]> {
  const perCharge = refundsEach + 1;
  const eventIds = Array.from({ length: charges * perCharge }, newEventId);
  const sign = options.createdAt === "reversed" ? -1 : 1;
  const rows = await sql<{ aggregateId: string; id: string; sequence: number }[]>`
    with c as (
      insert into charges (id, amount_cents, refunded_cents, last_sequence)
      select gen_random_uuid(), 1000 * ${perCharge}, 100 * ${refundsEach}, ${perCharge}
      from generate_series(1, ${charges})
      returning id
    ), numbered as (
      select id, row_number() over () as n from c
    ), events as (
      select c.id as charge_id, c.n, s as sequence, row_number() over (order by s, c.n) as k
      from numbered c cross join generate_series(1, ${perCharge}) as s
    )
    insert into outbox (id, aggregate_id, aggregate_type, sequence, event_type, payload, created_at)
    select e.id, ev.charge_id, 'charge', ev.sequence,
           case when ev.sequence = 1 then ${CHARGE_CREATED} else 'ChargeRefunded' end,
           case when ev.sequence = 1 then json_build_object('chargeId', ev.charge_id, 'amountCents', 1000 * ${perCharge})::text
                else json_build_object('chargeId', ev.charge_id, 'refundId', gen_random_uuid(), 'amountCents', 100,
                                       'refundedCents', 100 * (ev.sequence - 1))::text end,
           now() - interval '1 hour' + make_interval(secs => (ev.n + ${sign} * ev.sequence * ${charges}) / 1000.0)
    from events ev
    join unnest(${eventIds}::uuid[]) with ordinality as e(id, k) using (k)
    returning aggregate_id as "aggregateId", id, sequence`;
  const chains = new Map<string, string[]>();
  for (const row of [...rows].sort((a, b) => a.sequence - b.sequence)) {
    const events = chains.get(row.aggregateId) ?? [];
    events.push(row.id);
    chains.set(row.aggregateId, events);
  }
  return [...chains].map(([aggregateId, events]) => ({ aggregateId, events }));
}

/**
 * `more` ChargeRefunded rows after each chain's last event (sequence n + 1, n + 2, …), as
 * refunds written later would add them: the same aggregates go on where they stopped.
 */
export async function extendChains(sql: Sql, chains: readonly Chain[], more: number): Promise<Chain[]> {
  const added = chains.map((c) => ({ aggregateId: c.aggregateId, events: Array.from({ length: more }, newEventId), from: c.events.length + 1 }));
  const rows = added.flatMap((c) => c.events.map((id, i) => ({ id, aggregateId: c.aggregateId, sequence: c.from + i })));
  await sql`
    insert into outbox (id, aggregate_id, aggregate_type, sequence, event_type, payload)
    select t.id, t.aggregate_id, 'charge', t.sequence, 'ChargeRefunded',
           json_build_object('chargeId', t.aggregate_id, 'refundId', gen_random_uuid(), 'amountCents', 1,
                             'refundedCents', t.sequence - 1)::text
    from unnest(${rows.map((r) => r.id)}::uuid[], ${rows.map((r) => r.aggregateId)}::uuid[], ${rows.map((r) => r.sequence)}::int[])
      as t(id, aggregate_id, sequence)`;
  return chains.map((c, i) => ({ aggregateId: c.aggregateId, events: [...c.events, ...(added[i]?.events ?? [])] }));
}

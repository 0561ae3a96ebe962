// Scenario 13's refunds against the simulator's ledger and the database: one processor refund
// per refund that succeeded (found by the refund id in its metadata), none for one that failed,
// the charges' totals and events, and the two refunds whose answer was a 500 the processor kept.
import type { Sql } from "../../lib/platform/db.ts";
import type { ProcessorSim } from "../../testkit/processor-sim.ts";
import type { Tally } from "./client.ts";
import type { Ctx } from "./report.ts";

export type Stored500 = Readonly<Record<"500-after" | "500-before", string>>;

interface RefundRow {
  readonly id: string;
  readonly charge_id: string;
  readonly amount_cents: number;
  readonly status: string;
  readonly processor_refund_id: string | null;
}

export async function refundInvariants(ctx: Ctx, sim: ProcessorSim, tally: Tally, stored500: Stored500): Promise<void> {
  const { sql, checks } = ctx;
  const ledger = sim.ledger();
  const rows = await sql<RefundRow[]>`select id::text, charge_id::text, amount_cents, status, processor_refund_id from refunds`;
  const atProcessor = new Map<string, typeof ledger.refunds>();
  for (const r of ledger.refunds) atProcessor.set(r.metadata.refund_id ?? "", [...(atProcessor.get(r.metadata.refund_id ?? "") ?? []), r]);
  const succeeded = rows.filter((r) => r.status === "succeeded");
  const failed = rows.filter((r) => r.status === "failed").length;
  checks.check(succeeded.length > 0 && failed > 0 && rows.every((r) => r.status !== "pending"), `every refund is final, some succeeded and some failed at the processor (${succeeded.length} succeeded, ${failed} failed)`, `${rows.filter((r) => r.status === "pending").length} pending of ${rows.length}`);
  const differ = rows.filter((r) => {
    const theirs = atProcessor.get(r.id) ?? [];
    // Failed: refused at the create (none), or made and failed by the processor (one, failed).
    if (r.status !== "succeeded") return theirs.length > 1 || theirs.some((t) => t.status !== "failed" || t.id !== r.processor_refund_id);
    return theirs.length !== 1 || theirs[0]!.id !== r.processor_refund_id || theirs[0]!.amount !== r.amount_cents || theirs[0]!.status !== "succeeded";
  });
  checks.check(differ.length === 0, "each refund is the processor's: one processor refund of its amount for each that succeeded; for each that failed, none, or the one the processor failed", `${differ.length} differ, e.g. ${differ[0]?.id}: ${(atProcessor.get(differ[0]?.id ?? "") ?? []).length} at the processor`);
  const known = new Set(rows.map((r) => r.id));
  const stray = ledger.refunds.filter((r) => !known.has(r.metadata.refund_id ?? ""));
  checks.check(stray.length === 0, "no processor refund without a refund of ours", `${stray.length} stray`);
  const sum = succeeded.reduce((n, r) => n + r.amount_cents, 0);
  checks.check(ledger.totals.refunded === sum, "the processor refunded exactly what our succeeded refunds add up to", `${ledger.totals.refunded} refunded, ${sum} in succeeded refunds`);
  const [totals] = await sql<{ off: number; pending: number }[]>`
    select count(*) filter (where c.refunded_cents <> coalesce((select sum(f.amount_cents) from refunds f where f.charge_id = c.id and f.status = 'succeeded'), 0))::int as off,
           count(*) filter (where c.pending_refund_cents <> 0)::int as pending
      from charges c`;
  checks.check(totals?.off === 0 && totals.pending === 0, "each charge's refunded total is its succeeded refunds' sum, nothing left reserved", `${totals?.off} totals off, ${totals?.pending} still reserved`);
  const events = await sql<{ refund_id: string; n: number }[]>`
    select payload::jsonb->>'refundId' as refund_id, count(*)::int as n from outbox where event_type = 'ChargeRefunded' group by 1`;
  const eventsOf = new Map(events.map((e) => [e.refund_id, e.n]));
  const wrongEvents = rows.filter((r) => (eventsOf.get(r.id) ?? 0) !== (r.status === "succeeded" ? 1 : 0));
  checks.check(wrongEvents.length === 0 && events.length === succeeded.length, "one ChargeRefunded per succeeded refund, none for a failed one", `${wrongEvents.length} refunds with another count`);
  const refused = tally.answers.filter((a) => a.status === 422);
  const unrefused = refused.filter((a) => !rows.some((r) => r.status === "failed" && a.body.includes(r.id)));
  checks.check(unrefused.length === 0, `every refund answered 422 (${refused.length} answers) failed, here and at the processor`, `${unrefused.length} not`);
  const answered = [...tally.answers].filter((a) => a.status === 201);
  const unbacked = answered.filter((a) => !succeeded.some((r) => r.id === (JSON.parse(a.body) as { id: string }).id));
  checks.check(unbacked.length === 0, `every refund answered 201 (${answered.length} answers) succeeded, here and at the processor`, `${unbacked.length} not`);
  checks.check(tally.count((a) => a.status >= 500 || a.status === 0) > 0, "the faults hit refunds too (5xx or no answer)");

  for (const [kind, key] of Object.entries(stored500)) {
    const [row] = await sql<{ status: string; response_status: number | null; parked: boolean; refund_id: string }[]>`
      select status, response_status, parked_at is not null as parked, resume->>'refundId' as refund_id from idempotency_keys where key = ${key}`;
    const theirs = atProcessor.get(row?.refund_id ?? "") ?? [];
    // After the effect, the refund the 500 hid, under attempt 0's key; before it, attempt 1's.
    const expected = kind === "500-after" ? `${row?.refund_id}:refund` : `${row?.refund_id}:refund:1`;
    checks.check(
      row?.status === "COMPLETED" && row.response_status === 201 && !row.parked && theirs.length === 1 && theirs[0]!.idempotencyKey === expected,
      `the refund answered a ${kind.replace("-", " ")} kept under its key ended 201 without an operator (its client gave up at the 502), one processor refund, under ${kind === "500-after" ? "its first" : "its second attempt's"} key`,
      `${row?.status} ${row?.response_status} parked ${row?.parked}, ${theirs.length} at the processor under ${theirs.map((r) => r.idempotencyKey).join(", ")}`,
    );
  }
}

/** The refund keys: all, those that saw an unknown outcome (a try ended without one), those a kept 500 moved to the next attempt, and those parked. */
export async function resolvedByListing(sql: Sql): Promise<{ refunds: number; unknown: number; kept500: number; parked: number }> {
  const [row] = await sql<{ refunds: number; unknown: number; kept500: number; parked: number }[]>`
    select count(*)::int as refunds,
           count(*) filter (where attempts > 0 and status = 'COMPLETED')::int as unknown,
           count(*) filter (where coalesce((resume->>'refundAttempt')::int, 0) > 0 and status = 'COMPLETED')::int as kept500,
           count(*) filter (where parked_at is not null)::int as parked
      from idempotency_keys where endpoint = 'POST /charges/:id/refunds'`;
  return row ?? { refunds: 0, unknown: 0, kept500: 0, parked: 0 };
}

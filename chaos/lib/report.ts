// Invariant lines, the end-to-end delivery checks every scenario shares, the summary table,
// and the scenario wrapper (fresh database, cleanup in finally, exit code).
import type { Sql } from "../../lib/platform/db.ts";
import type { ScratchDatabase } from "../../testkit/database.ts";
import { killAll } from "../../testkit/processes.ts";
import { EmbeddedPostgresError } from "../../dev/embedded-postgres.ts";
import { waitUntil } from "../../testkit/wait.ts";
import { freshDatabase, LOG_DIR } from "./harness.ts";
import { Tally } from "./client.ts";
import type { SubscriberView } from "./subscriber.ts";

export class Checks {
  held = 0;
  violated = 0;
  check(ok: boolean, text: string, detail = ""): boolean {
    if (ok) this.held += 1;
    else this.violated += 1;
    console.log(`  ${ok ? "held    " : "VIOLATED"}  ${text}${!ok && detail ? `  (${detail})` : ""}`);
    return ok;
  }
}

export interface Ctx {
  readonly db: ScratchDatabase;
  readonly sql: Sql;
  /** Unique per run: the scenario's topics never mix with anyone else's. */
  readonly prefix: string;
  readonly consumer: string;
  readonly tally: Tally;
  readonly checks: Checks;
  sub?: SubscriberView;
}

export interface Totals {
  charges: number;
  outbox: number;
  unpublished: number;
  lost: number;
}

async function counts(ctx: Ctx, excluded: readonly string[] = []): Promise<Totals & { outboxIds: string[] }> {
  const [c] = await ctx.sql<{ n: number }[]>`select count(*)::int as n from charges`;
  const all = await ctx.sql<{ id: string; published: boolean }[]>`select id::text, published_at is not null as published from outbox`;
  const rows = all.filter((r) => !excluded.includes(r.id));
  const arrivals = ctx.sub?.arrivals ?? new Map<string, number>();
  return {
    charges: c?.n ?? 0,
    outbox: rows.length,
    unpublished: rows.filter((r) => !r.published).length,
    lost: rows.filter((r) => !arrivals.has(r.id)).length,
    outboxIds: rows.map((r) => r.id),
  };
}

/** Waits (bounded) until every outbox row but `excluded` is published and has reached the subscriber. */
export async function settle(ctx: Ctx, timeoutMs = 15_000, excluded: readonly string[] = []): Promise<Totals> {
  let last: Totals | undefined;
  try {
    await waitUntil(async () => {
      last = await counts(ctx, excluded);
      return last.unpublished === 0 && last.lost === 0;
    }, timeoutMs, "every outbox row to be published and delivered", 100);
  } catch {
    // Reported by the invariants below, with the numbers.
  }
  return last ?? (await counts(ctx, excluded));
}

/**
 * The end-to-end invariants every scenario ends with. `excluded`: outbox rows that must never
 * be delivered (a poison row the relay parks), left out of every count; the scenario checks them.
 */
export async function deliveryInvariants(ctx: Ctx, timeoutMs = 15_000, excluded: readonly string[] = []): Promise<Totals> {
  const t = await settle(ctx, timeoutMs, excluded);
  const { checks, sql } = ctx;
  const ids = [...ctx.tally.chargeIds()];
  const rows = await sql<{ id: string; events: number }[]>`
    select c.id::text, (select count(*)::int from outbox o where o.aggregate_id = c.id) as events
      from charges c where c.id = any(${ids}::uuid[])`;
  const missing = ids.length - rows.length;
  checks.check(missing === 0, "every charge answered with 201 exists in the database", `${missing} missing`);
  const wrong = (await sql<{ n: number }[]>`
    select count(*)::int as n from charges c where (select count(*) from outbox o where o.aggregate_id = c.id) <> c.last_sequence`)[0]?.n ?? 0;
  // Its creation (sequence 1), and one row for each later event (a capture, a refund): last_sequence in all.
  checks.check(wrong === 0, "each charge has exactly one outbox row per event (as many as its last_sequence)", `${wrong} charges without exactly that many`);
  checks.check(t.unpublished === 0, "every outbox row has published_at set", `${t.unpublished} still pending`);
  checks.check(t.lost === 0 && missing === 0, "every outbox row reached the subscriber at least once (lost = 0)", `${t.lost} lost`);
  const inbox = await sql<{ dup: number; stray: number; total: number }[]>`
    select (select count(*)::int from (select event_id from inbox where consumer = ${ctx.consumer}
              group by event_id having count(*) > 1) d) as dup,
           (select count(*)::int from inbox i where consumer = ${ctx.consumer}
              and not exists (select 1 from outbox o where o.id = i.event_id)) as stray,
           (select count(*)::int from inbox where consumer = ${ctx.consumer}) as total`;
  const ib = inbox[0] ?? { dup: -1, stray: -1, total: -1 };
  checks.check(ib.dup === 0 && ib.stray === 0 && ib.total === t.outbox, "the inbox holds each event exactly once",
    `${ib.total} inbox rows for ${t.outbox} events, ${ib.dup} doubled, ${ib.stray} unknown`);
  const sub = ctx.sub;
  const processedTwice = sub?.processedTwice() ?? [];
  checks.check(processedTwice.length === 0, "the subscriber processed each event once (every redelivery dropped by the inbox)",
    `${processedTwice.length} events processed again: ${processedTwice.slice(0, 3).join(", ")}`);
  return { ...t, lost: t.lost + missing };
}

export function summary(ctx: Ctx, t: Totals): void {
  const a = ctx.tally;
  const sub = ctx.sub;
  const deliveries = sub?.deliveries() ?? 0;
  const rows: [string, number][] = [
    ["requests", a.requests],
    ["201 created", a.fresh201],
    ["201 replay", a.replays],
    ["409", a.count((x) => x.status === 409)],
    ["422", a.count((x) => x.status === 422)],
    ["5xx", a.count((x) => x.status >= 500)],
    ["no answer", a.count((x) => x.status === 0)],
    ["charges", t.charges],
    ["outbox rows", t.outbox],
    ["events delivered", deliveries],
    ["duplicates delivered", deliveries - (sub?.arrivals.size ?? 0)],
    ["duplicates dropped by inbox", sub?.droppedByInbox() ?? 0],
    ["lost (must be 0)", t.lost],
  ];
  console.log("  ┌─────────────────────────────┬─────────┐");
  for (const [k, v] of rows) console.log(`  │ ${k.padEnd(27)} │ ${String(v).padStart(7)} │`);
  console.log("  └─────────────────────────────┴─────────┘");
}

/** Runs one scenario with its own database; always cleans up; exits 1 on any violation or error. */
export async function scenario(label: string, title: string, body: (ctx: Ctx) => Promise<Totals>): Promise<never> {
  const started = Date.now();
  console.log(`chaos ${label}: ${title}`);
  const db = await freshDatabase(label).catch((error: unknown) => {
    // The embedded Postgres explains itself in one line (e.g. binaries that cannot run).
    if (!(error instanceof EmbeddedPostgresError)) throw error;
    console.error(`chaos ${label}: ${error.message}`);
    process.exit(1);
  });
  const sql = db.sql;
  const run = Math.random().toString(36).slice(2, 8);
  const ctx: Ctx = { db, sql, prefix: `chaos/${label}/${run}/`, consumer: `chaos-${label}-${run}`, tally: new Tally(), checks: new Checks() };
  let failed = false;
  const onSignal = (): void => void killAll().finally(() => process.exit(130));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const totals = await body(ctx);
    ctx.checks.check(totals.lost === 0, "lost = 0", `${totals.lost} lost`);
    summary(ctx, totals);
  } catch (error) {
    failed = true;
    console.log(`  VIOLATED  scenario aborted: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    await ctx.sub?.stop().catch(() => {});
    await killAll();
    await db.drop().catch((e: unknown) => console.log(`  (could not drop ${db.name}: ${String(e)})`));
  }
  const ok = !failed && ctx.checks.violated === 0;
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`chaos ${label}: ${ok ? "PASS" : "FAIL"}, ${ctx.checks.held} held, ${ctx.checks.violated} violated, ${secs} s${ok ? "" : ` (process logs: ${LOG_DIR})`}`);
  process.exit(ok ? 0 : 1);
}

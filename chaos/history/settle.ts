// The end of the history run, after the heal: waits (bounded) for the completer to finish every
// key and the relay to publish every row, and for every event to reach the subscriber and the
// plain receiver; then reads the committed events from the database.
import type { Sql } from "../../lib/platform/db.ts";
import { waitUntil } from "../../testkit/wait.ts";
import type { CommittedRecord } from "./history.ts";

// The completer finishes a key once its lease ends (seconds) and the processor answers; the
// relay drains a backlog in seconds. Past these the run goes on and the checker tells.
const KEYS_TIMEOUT_MS = 120_000;
const DRAIN_TIMEOUT_MS = 60_000;
const ARRIVAL_TIMEOUT_MS = 60_000;

export async function startedKeys(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where status = 'STARTED'`;
  return row?.n ?? 0;
}

export async function unpublishedRows(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null`;
  return row?.n ?? 0;
}

export async function committedEvents(sql: Sql): Promise<CommittedRecord[]> {
  const rows = await sql<{ id: string; aggregate: string; sequence: number }[]>`
    select id::text, aggregate_id::text as aggregate, sequence from outbox order by created_at, sequence`;
  return rows.map((r) => ({ type: "committed", event_id: r.id, aggregate: r.aggregate, sequence: r.sequence }));
}

/** Waits for the completer, the relay, then every event at both consumers; a line for each wait. */
export async function settle(sql: Sql, arrived: () => Promise<{ deliveries: Set<string>; receipts: Set<string> }>): Promise<void> {
  const waited = async (what: string, done: () => Promise<boolean>, timeoutMs: number): Promise<void> => {
    const t = Date.now();
    const ok = await waitUntil(done, timeoutMs, what, 250).then(() => true, () => false);
    console.log(`settle: ${what}: ${ok ? `after ${((Date.now() - t) / 1000).toFixed(1)} s` : `not within ${timeoutMs / 1000} s`}`);
  };
  await waited("every key finished (the completer)", async () => (await startedKeys(sql)) === 0, KEYS_TIMEOUT_MS);
  await waited("every row published (the relay)", async () => (await unpublishedRows(sql)) === 0, DRAIN_TIMEOUT_MS);
  await waited("every event at the subscriber and the plain receiver", async () => {
    const ids = (await committedEvents(sql)).map((c) => c.event_id);
    const { deliveries, receipts } = await arrived();
    return ids.every((id) => deliveries.has(id) && receipts.has(id));
  }, ARRIVAL_TIMEOUT_MS);
}

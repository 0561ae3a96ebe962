// The backlog as the console's chart reads it: the outbox's pending, parked and held counts,
// the oldest pending row's age, and how many rows were published in each of the last minutes
// (from published_at, through its partial index).
import type { Sql } from "../platform/db.ts";
import { pendingStats } from "./sql.ts";

export interface Backlog {
  readonly at: string;
  readonly pending: number;
  readonly parked: number;
  readonly held: number;
  readonly oldestPendingAgeSeconds: number;
  /** Oldest minute first, the current (partial) minute last. */
  readonly publishedPerMinute: readonly { readonly minute: string; readonly count: number }[];
}

export const BACKLOG_MINUTES = 15;

export async function backlog(sql: Sql, minutes = BACKLOG_MINUTES): Promise<Backlog> {
  const stats = await pendingStats(sql);
  const rows = await sql<{ minute: Date; count: number }[]>`
    select date_trunc('minute', published_at) as minute, count(*)::int as count
      from outbox
     where published_at is not null and published_at > date_trunc('minute', now()) - make_interval(mins => ${minutes - 1})
       and parked_at is null
     group by 1`;
  const [clock] = await sql<{ now: Date }[]>`select date_trunc('minute', now()) as now`;
  const now = clock!.now.getTime();
  const byMinute = new Map(rows.map((r) => [r.minute.getTime(), r.count]));
  const publishedPerMinute = Array.from({ length: minutes }, (_, i) => {
    const minute = now - (minutes - 1 - i) * 60_000;
    return { minute: new Date(minute).toISOString(), count: byMinute.get(minute) ?? 0 };
  });
  return { at: new Date().toISOString(), ...stats, publishedPerMinute };
}

// The backlog as the console's chart reads it: the outbox's pending, parked and held counts, the
// oldest pending row's age, and the rows published in each of the last minutes (oldest first, the
// current partial minute last), counted from published_at through its partial index.
import type { Sql } from "../platform/db.ts";
import { pendingStats } from "./sql.ts";

const MINUTES = 15;

export async function backlog(sql: Sql) {
  const stats = await pendingStats(sql);
  const rows = await sql<{ minute: Date; count: number }[]>`
    select date_trunc('minute', published_at) as minute, count(*)::int as count
      from outbox
     where published_at is not null and published_at > date_trunc('minute', now()) - make_interval(mins => ${MINUTES - 1})
       and parked_at is null
     group by 1`;
  const [clock] = await sql<{ now: Date }[]>`select date_trunc('minute', now()) as now`;
  const now = clock!.now.getTime();
  const byMinute = new Map(rows.map((r) => [r.minute.getTime(), r.count]));
  const publishedPerMinute = Array.from({ length: MINUTES }, (_, i) => {
    const minute = now - (MINUTES - 1 - i) * 60_000;
    return { minute: new Date(minute).toISOString(), count: byMinute.get(minute) ?? 0 };
  });
  return { at: new Date().toISOString(), ...stats, publishedPerMinute };
}

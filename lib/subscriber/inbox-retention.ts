// Inbox rows are needed only while a redelivery can come: older ones go in bounded batches, one process
// at a time. Places stay (else a late refund would wait for the gap timeout); held events never go by age.
import { describeDbError, type Sql } from "../platform/db.ts";
import { every, type Every } from "../platform/every.ts";
import { deleteUnderJobLock } from "../platform/job-lock.ts";
import type { Logger } from "../platform/log.ts";

// Per statement, so its locks stay short.
export const INBOX_DELETE_BATCH = 1000;
// Statements per run: one run ends behind any backlog; the next continues.
const MAX_BATCHES_PER_RUN = 100;
const INBOX_RETENTION_INTERVAL_MS = 300_000;
// In the range of the relay's ops jobs' lock ids (7_310_422_118_1xx).
const INBOX_RETENTION_LOCK_ID = 7_310_422_118_106n;

type InboxRetentionResult =
  | { readonly job: "inbox-retention"; readonly deleted: number; readonly batches: number }
  | { readonly job: "inbox-retention"; readonly skipped: true };

export async function runInboxRetention(sql: Sql, retentionSeconds: number, log: Logger, signal?: AbortSignal): Promise<InboxRetentionResult> {
  const limits = { batch: INBOX_DELETE_BATCH, maxBatches: MAX_BATCHES_PER_RUN };
  const outcome = await deleteUnderJobLock(sql, INBOX_RETENTION_LOCK_ID, limits, (conn) => deleteOldInbox(conn, retentionSeconds, INBOX_DELETE_BATCH), signal);
  if (!outcome.ran) {
    log.debug("inbox retention skipped: another process is running it");
    return { job: "inbox-retention", skipped: true };
  }
  if (outcome.value.deleted > 0) log.info("old inbox rows deleted", { job: "inbox-retention", ...outcome.value });
  return { job: "inbox-retention", ...outcome.value };
}

export function startInboxRetention(sql: Sql, retentionSeconds: number, log: Logger): Every {
  return every({
    delayMs: INBOX_RETENTION_INTERVAL_MS,
    runAtOnce: true,
    job: (signal) => runInboxRetention(sql, retentionSeconds, log, signal),
    onError: (error) => log.warn("inbox retention failed", { error: describeDbError(error) }),
  });
}

async function deleteOldInbox(sql: Sql, retentionSeconds: number, batch: number): Promise<number> {
  const result = await sql`
    delete from inbox
     where (event_id, consumer) in (
       select event_id, consumer from inbox
        where received_at < now() - make_interval(secs => ${retentionSeconds}::int)
        order by received_at
        limit ${batch}
        for update skip locked)`;
  return result.count;
}

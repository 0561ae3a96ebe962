// Inbox retention: the inbox only has to remember an event while a redelivery of it can
// still come (see SUBSCRIBER_INBOX_RETENTION_SECONDS); older rows are deleted in bounded
// batches, by one subscriber process at a time. It leaves the order's state alone: an
// aggregate's place (subscriber_sequences) is needed for as long as the aggregate can have
// events, a charge's refund coming at any time (without it the next event would look like a
// new aggregate's and wait for the gap timeout), and held events leave by their turn or the
// gap timeout, never by age.
import type { Sql } from "../platform/db.ts";
import { describeDbError } from "../platform/db.ts";
import { every, type Every } from "../platform/every.ts";
import { deleteUnderJobLock } from "../platform/job-lock.ts";
import type { Logger } from "../platform/log.ts";
import { deleteOldInbox } from "./inbox-sql.ts";

// Rows per delete statement: each statement's locks last milliseconds.
export const INBOX_DELETE_BATCH = 1000;
// Statements per run, so one run ends behind any backlog; the next run continues.
const MAX_BATCHES_PER_RUN = 100;
// The inbox grows by one row per event: every five minutes keeps a run's work small.
const INBOX_RETENTION_INTERVAL_MS = 300_000;
// The advisory lock id of this job, in the range of the relay's ops jobs (7_310_422_118_1xx).
const INBOX_RETENTION_LOCK_ID = 7_310_422_118_106n;

type InboxRetentionResult =
  | { readonly job: "inbox-retention"; readonly deleted: number; readonly batches: number }
  | { readonly job: "inbox-retention"; readonly skipped: true };

/** One run: `skipped` when another process is running it right now. */
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

/** Runs the retention now and then on its interval until stop(); a failed run is logged and tried again later. */
export function startInboxRetention(sql: Sql, retentionSeconds: number, log: Logger): Every {
  return every({
    delayMs: INBOX_RETENTION_INTERVAL_MS,
    runAtOnce: true,
    job: (signal) => runInboxRetention(sql, retentionSeconds, log, signal),
    onError: (error) => log.warn("inbox retention failed", { error: describeDbError(error) }),
  });
}

// One event through the inbox: in ONE transaction, the inbox row and the handler's own writes;
// a conflict on the inbox row means "already processed" and the handler is skipped. Retried
// while the database is away; a handler that keeps failing is given up on.
import { isUnavailable, describeDbError, type Sql, type Tx } from "../shared/db.ts";
import { transaction } from "../shared/tx.ts";
import { dropReadOnlyConnections, isReadOnly } from "../shared/read-only.ts";
import type { EventEnvelope } from "../events.ts";
import { recordInbox } from "./inbox-sql.ts";
import { retryWithBackoff } from "./retry.ts";

// A handler that keeps failing (not the database being away) is given up after this many
// attempts, so one poison event cannot stall the stream; the event then goes to the
// dead-letter table.
export const MAX_HANDLER_ATTEMPTS = 5;

export interface Processing {
  readonly sql: Sql;
  readonly consumer: string;
  readonly handler?: (event: EventEnvelope, tx: Tx) => Promise<void> | void;
  readonly onError?: (description: string) => void;
  /** True once the subscriber closes: retries stop with `Closing`. */
  readonly closing: () => boolean;
}

/**
 * The transaction, retried; resolves to "was a duplicate". Rejects with the handler's last
 * error after MAX_HANDLER_ATTEMPTS of its own failures, or with `Closing`.
 */
export function processEvent(processing: Processing, event: EventEnvelope): Promise<boolean> {
  // Only the handler's own failures spend its budget, not the database being away.
  let failures = 0;
  return retryWithBackoff(() => inboxTransaction(processing, event), {
    closing: processing.closing,
    onFailure: (error, attempt) => {
      // A server gone read-only (a failover): the retry must find the one that writes.
      if (isReadOnly(error)) void dropReadOnlyConnections(processing.sql);
      if (!isUnavailable(error) && ++failures >= MAX_HANDLER_ATTEMPTS) throw error;
      processing.onError?.(`event ${event.id}: attempt ${attempt} failed: ${describeDbError(error)}`);
    },
  });
}

/** One attempt; resolves to "was a duplicate". */
function inboxTransaction(processing: Processing, event: EventEnvelope): Promise<boolean> {
  // Postgres may go away mid-transaction: the attempt fails, the retry finds a new connection.
  // `transaction` (not sql.begin) so that a statement is never sent on the dead connection,
  // which postgres.js answers with an uncatchable error ending the process.
  return transaction(processing.sql, async (tx) => {
    const fresh = await recordInbox(tx, event.id, processing.consumer);
    if (fresh) await processing.handler?.(event, tx);
    return !fresh;
  });
}

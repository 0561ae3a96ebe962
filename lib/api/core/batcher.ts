// Group commit in the API: while `maxInFlight` operation statements are already running, the
// requests that arrive queue here, and the next free turn sends up to `maxBatch` of them, all
// of one operation, as ONE statement and one transaction (statement.ts). Under load this cuts
// what Postgres spends per request (statement start, snapshot, commit record, WAL flush,
// round trip) and what the API spends (one query instead of several); with a statement
// free, a request is sent alone at once, so a quiet API adds no wait.
//
// Every request still gets its own outcome from its own rows. What requests of one batch
// share is their fate on a fault: a cancel, a time bound or a lost connection fails them
// all, with nothing committed (a retry with the same key is safe, as for one request). Any
// other error of a batch (a constraint, a bug of one row's data) does not decide for the
// others: each is sent again alone, and gets what its own statement says.
import type { Sql } from "../../shared/db.ts";
import { isConnectionLost, isUnavailable } from "../../shared/db.ts";
import { REQUEST_DEADLINE, TimeBoundError } from "../../shared/pool-gate.ts";
import { runOperation, type CompiledOperation, type KeyRow, type RequestRow } from "./statement.ts";

export interface BatcherOptions {
  /** Statements running at once; more requests than this wait and go in batches. */
  readonly maxInFlight: number;
  /** Requests in one statement at most. */
  readonly maxBatch: number;
  /** The key rows' retention, shared by every request. */
  readonly ttlSeconds: number;
  /**
   * The server's bound on one statement: a request still queued when less than this is left
   * of its deadline is refused with nothing sent, as the pool gate refuses it (pool-gate.ts).
   */
  readonly statementTimeoutMs: number;
}

/** Running totals for the API's metrics (metrics.ts observeStatements). */
export interface StatementStats {
  /** Statements sent (a batch is one). */
  readonly statements: number;
  /** Requests those statements answered (a batch answers several). */
  readonly requests: number;
  /** Requests waiting now for a statement to end. */
  readonly queued: number;
}

/** One request as the batcher takes it. */
export interface Submission {
  readonly operation: CompiledOperation;
  readonly row: RequestRow;
  /** Requests with the same value never share a statement (Prepared.exclusive). */
  readonly exclusive: string | undefined;
}

export interface Batcher extends StatementStats {
  /** The statement's row for `submission`, sent alone or in a batch; `endsAt` as for settleBy(). */
  run(submission: Submission, endsAt: number): Promise<KeyRow>;
  /** Statements running now. */
  readonly inFlight: number;
}

interface Pending extends Submission {
  readonly endsAt: number;
  readonly resolve: (row: KeyRow) => void;
  readonly reject: (error: unknown) => void;
}

/** One row of a batch: a request, and the requests for the same (tenant, key) queued with it. */
interface Entry {
  readonly leader: Pending;
  readonly followers: Pending[];
}

export function createBatcher(sql: Sql, options: BatcherOptions): Batcher {
  let inFlight = 0;
  let queue: Pending[] = [];
  let statements = 0;
  let requests = 0;

  const finished = (): void => {
    inFlight--;
    pump();
  };
  const pump = (): void => {
    while (inFlight < options.maxInFlight && queue.length > 0) {
      const { batch, rest } = takeBatch(queue, options);
      queue = rest;
      if (batch.length === 0) continue;
      inFlight++;
      statements++;
      for (const entry of batch) requests += 1 + entry.followers.length;
      // send() settles every request itself; a bug that escapes it still answers them.
      void send(sql, options.ttlSeconds, batch)
        .catch((error: unknown) => batch.forEach((entry) => fail(entry, error)))
        .finally(finished);
    }
  };

  return {
    run(submission, endsAt) {
      if (inFlight < options.maxInFlight && queue.length === 0) {
        // Nobody waiting and a statement free: sent alone, at once (the quiet path).
        inFlight++;
        statements++;
        requests++;
        const sent = runOperation(sql, submission.operation, options.ttlSeconds, [submission.row], endsAt).then((rows) => rows[0]!);
        void sent.then(finished, finished);
        return sent;
      }
      return new Promise<KeyRow>((resolve, reject) => {
        queue.push({ ...submission, endsAt, resolve, reject });
        pump();
      });
    },
    get inFlight() {
      return inFlight;
    },
    get queued() {
      return queue.length;
    },
    get statements() {
      return statements;
    },
    get requests() {
      return requests;
    },
  };
}

/**
 * The next batch from the front of the queue, in arrival order, all of the first request's
 * operation, at most maxBatch rows. Requests for a (tenant, key) already in the batch follow
 * its first request instead of taking a row (see settle()); a request whose `exclusive` value
 * is already in the batch waits for the next one. A request whose deadline left no room for a
 * statement is refused here; the others stay queued in order.
 */
function takeBatch(queue: readonly Pending[], options: BatcherOptions): { batch: Entry[]; rest: Pending[] } {
  const batch: Entry[] = [];
  const rest: Pending[] = [];
  const byKey = new Map<string, Entry>();
  const exclusives = new Set<string>();
  const now = performance.now();
  for (const item of queue) {
    if (item.endsAt - now < options.statementTimeoutMs) {
      item.reject(new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed while waiting for a statement"));
      continue;
    }
    if (batch.length > 0 && batch[0]!.leader.operation !== item.operation) {
      rest.push(item);
      continue;
    }
    const key = `${item.row.tenant.length}:${item.row.tenant}${item.row.key}`;
    const entry = byKey.get(key);
    if (entry !== undefined) entry.followers.push(item);
    else if (batch.length < options.maxBatch && !(item.exclusive !== undefined && exclusives.has(item.exclusive))) {
      const added: Entry = { leader: item, followers: [] };
      byKey.set(key, added);
      if (item.exclusive !== undefined) exclusives.add(item.exclusive);
      batch.push(added);
    } else rest.push(item);
  }
  return { batch, rest };
}

/** The earliest deadline among a row's requests: its statement is cancelled then, so none is answered late. */
function deadlineOf(entry: Entry): number {
  return entry.followers.reduce((earliest, follower) => Math.min(earliest, follower.endsAt), entry.leader.endsAt);
}

/** One row sent alone, answering its leader and followers. */
function sendAlone(sql: Sql, ttlSeconds: number, entry: Entry): Promise<void> {
  return runOperation(sql, entry.leader.operation, ttlSeconds, [entry.leader.row], deadlineOf(entry)).then(
    (rows) => settle(sql, ttlSeconds, entry, rows[0]!),
    (error: unknown) => fail(entry, error),
  );
}

async function send(sql: Sql, ttlSeconds: number, batch: readonly Entry[]): Promise<void> {
  if (batch.length === 1) return sendAlone(sql, ttlSeconds, batch[0]!);
  const endsAt = Math.min(...batch.map(deadlineOf));
  let rows: KeyRow[];
  try {
    rows = await runOperation(sql, batch[0]!.leader.operation, ttlSeconds, batch.map((entry) => entry.leader.row), endsAt);
  } catch (error) {
    if (isUnavailable(error) || isConnectionLost(error)) {
      for (const entry of batch) fail(entry, error);
      return;
    }
    // Rolled back whole; each row is sent again alone and answered by its own statement.
    await Promise.all(batch.map((entry) => sendAlone(sql, ttlSeconds, entry)));
    return;
  }
  batch.forEach((entry, i) => settle(sql, ttlSeconds, entry, rows[i]!));
}

/**
 * The leader gets its row. Its followers, requests for the same key that were in flight
 * at the same time, get what a request arriving right after the leader's commit would
 * read: the key row the leader stored when it wrote (a replay, or a 422 for another body),
 * and otherwise the same row as the leader (the stored answer it found, or the lock another
 * request holds: a 409). A refused leader left the key unused, so each follower is sent
 * alone, as it would be right after.
 */
function settle(sql: Sql, ttlSeconds: number, entry: Entry, row: KeyRow): void {
  entry.leader.resolve(row);
  if (entry.followers.length === 0) return;
  if (row.refusal !== null) {
    for (const follower of entry.followers) void sendAlone(sql, ttlSeconds, { leader: follower, followers: [] });
    return;
  }
  const { row: leader, operation } = entry.leader;
  const seen: KeyRow =
    row.created === 1
      ? {
          got: null,
          created: 0,
          refusal: null,
          detail: null,
          request_hash: leader.requestHash,
          status: "COMPLETED",
          response_status: operation.op.status,
          response_body: leader.responseBody,
        }
      : row;
  for (const follower of entry.followers) follower.resolve(seen);
}

function fail(entry: Entry, error: unknown): void {
  entry.leader.reject(error);
  for (const follower of entry.followers) follower.reject(error);
}

// Group commit in the API: while `maxInFlight` charge statements are already running, the
// requests that arrive queue here, and the next free turn sends up to `maxBatch` of them as
// ONE statement and one transaction (charges-sql.ts createCharges). Under load this cuts
// what Postgres spends per charge (statement start, snapshot, commit record, WAL flush,
// round trip) and what the API spends (one query instead of several); with a statement
// free, a request is sent alone at once, as before, so a quiet API adds no wait.
//
// Every request still gets its own outcome from its own rows. What requests of one batch
// share is their fate on a fault: a cancel, a time bound or a lost connection fails them
// all, with nothing committed (a retry with the same key is safe, as for one request). Any
// other error of a batch (a constraint, a bug of one row's data) does not decide for the
// others: each is sent again alone, and gets what the one-request statement says.
import type { Sql } from "../shared/db.ts";
import { isConnectionLost, isUnavailable } from "../shared/db.ts";
import { REQUEST_DEADLINE, TimeBoundError } from "../shared/pool-gate.ts";
import { createCharge, createCharges, type CreateChargeParams, type CreateChargeRow } from "./charges-sql.ts";

export interface BatcherOptions {
  /** Charge statements running at once; more requests than this wait and go in batches. */
  readonly maxInFlight: number;
  /** Requests in one statement at most. */
  readonly maxBatch: number;
  /**
   * The server's bound on one statement: a request still queued when less than this is left
   * of its deadline is refused with nothing sent, as the pool gate refuses it (pool-gate.ts).
   */
  readonly statementTimeoutMs: number;
}

/** Running totals for the API's metrics (metrics.ts observeChargeStatements). */
export interface ChargeStatementStats {
  /** Charge statements sent (a batch is one). */
  readonly statements: number;
  /** Requests those statements answered (a batch answers several). */
  readonly requests: number;
  /** Requests waiting now for a statement to end. */
  readonly queued: number;
}

export interface ChargeBatcher extends ChargeStatementStats {
  /** createCharge's row for `params`, sent alone or in a batch; `endsAt` as for settleBy(). */
  create(params: CreateChargeParams, endsAt: number): Promise<CreateChargeRow>;
  /** Statements running now. */
  readonly inFlight: number;
}

interface Pending {
  readonly params: CreateChargeParams;
  readonly endsAt: number;
  readonly resolve: (row: CreateChargeRow) => void;
  readonly reject: (error: unknown) => void;
}

/** One row of a batch: a request, and the requests for the same (tenant, key) queued with it. */
interface Entry {
  readonly leader: Pending;
  readonly followers: Pending[];
}

export function createChargeBatcher(sql: Sql, options: BatcherOptions): ChargeBatcher {
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
      void send(sql, batch)
        .catch((error: unknown) => batch.forEach((entry) => fail(entry, error)))
        .finally(finished);
    }
  };

  return {
    create(params, endsAt) {
      if (inFlight < options.maxInFlight && queue.length === 0) {
        // Nobody waiting and a statement free: sent alone, at once (the quiet path).
        inFlight++;
        statements++;
        requests++;
        const sent = createCharge(sql, params, endsAt);
        void sent.then(finished, finished);
        return sent;
      }
      return new Promise<CreateChargeRow>((resolve, reject) => {
        queue.push({ params, endsAt, resolve, reject });
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
 * The next batch from the front of the queue, in arrival order, with the same shared fields,
 * at most maxBatch rows. Requests for a (tenant, key) already in the batch follow its first
 * request instead of taking a row (see settle()). A request whose deadline left no room for
 * a statement is refused here; the others stay queued in order.
 */
function takeBatch(queue: readonly Pending[], options: BatcherOptions): { batch: Entry[]; rest: Pending[] } {
  const batch: Entry[] = [];
  const rest: Pending[] = [];
  const byKey = new Map<string, Entry>();
  const now = performance.now();
  for (const item of queue) {
    if (item.endsAt - now < options.statementTimeoutMs) {
      item.reject(new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed while waiting for a charge statement"));
      continue;
    }
    if (batch.length > 0 && !sameShared(batch[0]!.leader.params, item.params)) {
      rest.push(item);
      continue;
    }
    const key = `${item.params.tenant.length}:${item.params.tenant}${item.params.key}`;
    const entry = byKey.get(key);
    if (entry !== undefined) entry.followers.push(item);
    else if (batch.length < options.maxBatch) {
      const added: Entry = { leader: item, followers: [] };
      byKey.set(key, added);
      batch.push(added);
    } else rest.push(item);
  }
  return { batch, rest };
}

function sameShared(a: CreateChargeParams, b: CreateChargeParams): boolean {
  return a.endpoint === b.endpoint && a.ttlSeconds === b.ttlSeconds && a.responseStatus === b.responseStatus && a.eventType === b.eventType;
}

/** The earliest deadline among a row's requests: its statement is cancelled then, so none is answered late. */
function deadlineOf(entry: Entry): number {
  return entry.followers.reduce((earliest, follower) => Math.min(earliest, follower.endsAt), entry.leader.endsAt);
}

/** One row sent alone (createCharge), answering its leader and followers. */
function sendAlone(sql: Sql, entry: Entry): Promise<void> {
  return createCharge(sql, entry.leader.params, deadlineOf(entry)).then((row) => settle(entry, row), (error: unknown) => fail(entry, error));
}

async function send(sql: Sql, batch: readonly Entry[]): Promise<void> {
  if (batch.length === 1) return sendAlone(sql, batch[0]!);
  const endsAt = Math.min(...batch.map(deadlineOf));
  let rows: CreateChargeRow[];
  try {
    rows = await createCharges(sql, batch[0]!.leader.params, batch.map((entry) => entry.leader.params), endsAt);
  } catch (error) {
    if (isUnavailable(error) || isConnectionLost(error)) {
      for (const entry of batch) fail(entry, error);
      return;
    }
    // Rolled back whole; each row is sent again alone and answered by its own statement.
    await Promise.all(batch.map((entry) => sendAlone(sql, entry)));
    return;
  }
  batch.forEach((entry, i) => settle(entry, rows[i]!));
}

/**
 * The leader gets its row. Its followers, requests for the same key that were in flight
 * at the same time, get what a request arriving right after the leader's commit would
 * read: the key row the leader stored when it created the charge (a replay, or a 422 for
 * another body), and otherwise the same row as the leader (the stored answer it found, or
 * the lock another request holds: a 409).
 */
function settle(entry: Entry, row: CreateChargeRow): void {
  entry.leader.resolve(row);
  if (entry.followers.length === 0) return;
  const { params } = entry.leader;
  const seen: CreateChargeRow =
    row.created === 1
      ? { got: null, created: 0, request_hash: params.requestHash, status: "COMPLETED", response_status: params.responseStatus, response_body: params.responseBody }
      : row;
  for (const follower of entry.followers) follower.resolve(seen);
}

function fail(entry: Entry, error: unknown): void {
  entry.leader.reject(error);
  for (const follower of entry.followers) follower.reject(error);
}

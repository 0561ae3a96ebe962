// Group commit of every key statement: while `maxInFlight` statements run, arriving work queues,
// and the next free turn sends up to `maxBatch` items of one kind as ONE statement. Each item
// gets its own row's result. A batch shares only its fate on a fault: a cancel, a time bound or
// a lost connection fails them all with nothing committed; any other error sends each item again
// alone. Two items for one key never share a statement: the second reads what the first stored.
import { isConnectionLost, isUnavailable, sqlState } from "../platform/db.ts";
import { REQUEST_DEADLINE, TimeBoundError } from "../platform/pool-gate.ts";

/** Running totals for the API's metrics. */
export interface StatementStats {
  /** Statements sent (a batch is one). */
  readonly statements: number;
  readonly requests: number;
  /** Requests waiting now for a statement. */
  readonly queued: number;
}

/** A statement that takes any number of items and answers each, in order. */
export interface GroupStatement<I, R> {
  send(items: readonly I[], endsAt: number): Promise<R[]>;
  /** Items sharing any of these values never share a statement. */
  conflicts(item: I): readonly string[];
}

export interface GroupOptions {
  readonly maxInFlight: number;
  readonly maxBatch: number;
  /** An item still queued with less than this left of its deadline is refused, nothing sent. */
  readonly statementTimeoutMs: number;
  /** Runs a statement holding one slot of the pool gate, `endsAt` its end; at once without a gate. */
  readonly slot?: <T>(work: (endsAt: number) => Promise<T>) => Promise<T>;
}

/** Each statement sent at once, alone. */
export const AT_ONCE: GroupOptions = { maxInFlight: Number.POSITIVE_INFINITY, maxBatch: 1, statementTimeoutMs: 0 };

export interface GroupCommit extends StatementStats {
  run<I, R>(statement: GroupStatement<I, R>, item: I, endsAt: number): Promise<R>;
}

interface Pending {
  readonly statement: GroupStatement<unknown, unknown>;
  readonly item: unknown;
  readonly endsAt: number;
  readonly resolve: (result: unknown) => void;
  readonly reject: (error: unknown) => void;
}

export function createGroupCommit(options: GroupOptions): GroupCommit {
  const slot = options.slot ?? ((work) => work(Number.POSITIVE_INFINITY));
  const sendIn = <I, R>(statement: GroupStatement<I, R>, items: readonly I[], endsAt: number): Promise<R[]> =>
    slot((slotEndsAt) => statement.send(items, Math.min(endsAt, slotEndsAt)));
  let inFlight = 0;
  let queue: Pending[] = [];
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
      group.statements++;
      group.requests += batch.length;
      // send() settles every item itself; a bug that escapes it still answers them.
      void send(batch, sendIn)
        .catch((error: unknown) => batch.forEach((p) => p.reject(error)))
        .finally(finished);
    }
  };
  const group = {
    statements: 0,
    requests: 0,
    get queued() {
      return queue.length;
    },
    run<I, R>(statement: GroupStatement<I, R>, item: I, endsAt: number): Promise<R> {
      if (inFlight < options.maxInFlight && queue.length === 0) {
        inFlight++;
        group.statements++;
        group.requests++;
        const sent = sendIn(statement, [item], endsAt).then((results) => results[0]!);
        void sent.then(finished, finished);
        return sent;
      }
      return new Promise<R>((resolve, reject) => {
        queue.push({ statement: statement as GroupStatement<unknown, unknown>, item, endsAt, resolve: resolve as (r: unknown) => void, reject });
        pump();
      });
    },
  };
  return group;
}

/**
 * The next batch, in arrival order: items of the first one's statement, at most maxBatch, none
 * sharing a conflict value. An item whose deadline left no room for a statement is refused.
 */
function takeBatch(queue: readonly Pending[], options: GroupOptions): { batch: Pending[]; rest: Pending[] } {
  const batch: Pending[] = [];
  const rest: Pending[] = [];
  const taken = new Set<string>();
  const now = performance.now();
  for (const p of queue) {
    if (p.endsAt - now < options.statementTimeoutMs) {
      p.reject(new TimeBoundError(REQUEST_DEADLINE, "the request's deadline passed while waiting for a statement"));
      continue;
    }
    const conflicts = batch.length < options.maxBatch && (batch.length === 0 || batch[0]!.statement === p.statement) ? p.statement.conflicts(p.item) : undefined;
    if (conflicts === undefined || conflicts.some((c) => taken.has(c))) {
      rest.push(p);
      continue;
    }
    for (const c of conflicts) taken.add(c);
    batch.push(p);
  }
  return { batch, rest };
}

type SendIn = <I, R>(statement: GroupStatement<I, R>, items: readonly I[], endsAt: number) => Promise<R[]>;

async function send(batch: readonly Pending[], sendIn: SendIn): Promise<void> {
  const statement = batch[0]!.statement;
  const endsAt = Math.min(...batch.map((p) => p.endsAt));
  let results: unknown[];
  try {
    results = await sendIn(statement, batch.map((p) => p.item), endsAt);
  } catch (error) {
    // A deadlock or serialization failure (class 40) is the batch's own: its rows alone lock less.
    const batchOnly = sqlState(error)?.startsWith("40") === true;
    if (batch.length === 1 || (!batchOnly && (isUnavailable(error) || isConnectionLost(error)))) {
      for (const p of batch) p.reject(error);
      return;
    }
    // Rolled back whole; each item is sent again alone, one after the other (no statements
    // pipelined behind a failing one).
    for (const p of batch) await sendIn(statement, [p.item], p.endsAt).then((r) => p.resolve(r[0]), p.reject);
    return;
  }
  batch.forEach((p, i) => p.resolve(results[i]));
}

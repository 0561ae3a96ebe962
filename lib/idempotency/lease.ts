// The key row's lease, as statements: each a transaction of its own, and each write a
// compare-and-set on the holder's token, so a holder whose lease was taken over can never write
// again (it finds no row and stops).
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import { inTransaction, tracingOn } from "../platform/trace-context.ts";
import type { FinalOutcome, Operation, Resume, StoredResponse } from "./model.ts";
import { compile, runFinish, type FinishRequest, type HeldKey, type KeyRef } from "./skeleton.ts";
import { AT_ONCE, createGroupCommit, type GroupStatement } from "./group-commit.ts";
import { keyId } from "./keys.ts";

const NO_BOUND = Number.POSITIVE_INFINITY;

/**
 * Takes the lease of a STARTED key whose lease has expired (its holder died, or gave up on an
 * unknown outcome); undefined when the key is not STARTED or its lease is alive. Two takers at
 * once: the second re-reads the row after the first commits and finds the lease alive.
 */
export async function takeLease(sql: Sql, ref: KeyRef, leaseMs: number, endsAt = NO_BOUND): Promise<HeldKey | undefined> {
  const token = crypto.randomUUID();
  const [row] = await boundedStatement(sql, endsAt, (q) => q<{ recovery_point: string; resume: Resume }[]>`
    update idempotency_keys
       set lease_token = ${token}::uuid, lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
     where tenant = ${ref.tenant} and key = ${ref.key} and endpoint = ${ref.endpoint}
       and status = 'STARTED' and lease_until <= now()
    returning recovery_point, resume`);
  return row ? { ...ref, token, point: row.recovery_point, resume: row.resume } : undefined;
}

interface StepRecord {
  readonly key: HeldKey;
  readonly point: string;
  readonly resume: Resume;
}

/** Records each step's result and renews its lease: for each record, whether its holder still held the key. */
async function recordSteps(sql: Sql, records: readonly StepRecord[], leaseMs: number, endsAt: number): Promise<boolean[]> {
  const rows = records.map((r, n) => ({ n, tenant: r.key.tenant, key: r.key.key, endpoint: r.key.endpoint, token: r.key.token, point: r.point, resume: r.resume }));
  const written = await boundedStatement(sql, endsAt, (q) => q<{ n: number }[]>`
    update idempotency_keys k
       set recovery_point = r.point, resume = r.resume,
           lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
      from jsonb_to_recordset(${q.json(rows as never)}) as r(n int, tenant text, key text, endpoint text, token uuid, point text, resume jsonb)
     where k.tenant = r.tenant and k.key = r.key and k.endpoint = r.endpoint
       and k.status = 'STARTED' and k.lease_token = r.token
    returning r.n`);
  const won = new Set(written.map((w) => w.n));
  return records.map((_, n) => won.has(n));
}

// The completer's back-off per key after an unknown outcome: 2^attempts seconds, at most this.
const MAX_BACKOFF_S = 300;

/**
 * Gives the lease up after an unknown outcome, keeping the recovery point: the next request
 * with the key may resume at once; the completer waits for the key's back-off.
 */
async function releaseLease(sql: Sql, key: HeldKey, resume: Resume, error: string, endsAt: number): Promise<boolean> {
  const rows = await boundedStatement(sql, endsAt, (q) => q`
    update idempotency_keys
       set lease_until = now(), lease_token = null, resume = ${q.json(resume as never)}, last_error = ${error},
           attempts = attempts + 1,
           next_attempt_at = now() + make_interval(secs => least(power(2, least(attempts, 16)), ${MAX_BACKOFF_S})::float8)
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`);
  return rows.count === 1;
}

/** Parks a key whose recovery data failed its schema, for an operator: the completer leaves it alone. */
async function parkKey(sql: Sql, key: HeldKey, reason: string, endsAt: number): Promise<boolean> {
  const rows = await boundedStatement(sql, endsAt, (q) => q`
    update idempotency_keys
       set lease_until = now(), lease_token = null, last_error = ${reason}, parked_at = now()
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`);
  return rows.count === 1;
}

/** The writes of a drive, each a compare-and-set by the holder. */
export interface LeaseWrites {
  record(key: HeldKey, point: string, resume: Resume): Promise<boolean>;
  finish(key: HeldKey, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse | undefined>;
  release(key: HeldKey, resume: Resume, error: string): Promise<boolean>;
  park(key: HeldKey, reason: string): Promise<boolean>;
}

// Every release or park conflicts with every other: each is a statement of its own (rare).
const ALONE = ["alone"];
const idOf = (k: KeyRef): string => keyId(k.tenant, k.key, k.endpoint);
// Outside the API (the completer, `bun run ops`): each write its own statement, sent at once.
const AT_ONCE_GROUP = createGroupCommit(AT_ONCE);

/**
 * The writes of a drive, each grouped with the same write of other holders under load, within a
 * deadline of its own from `endsAt()` (a statement sent after a processor call), and each a
 * transaction span of the request's trace. One key's two writes, or two finals of one
 * `exclusive` value, never share a statement.
 */
export function groupedWrites(sql: Sql, op: Operation, leaseMs: number, group = AT_ONCE_GROUP, endsAt = () => NO_BOUND): LeaseWrites {
  const finish = compile(sql, op, "finish");
  const exclusive = op.foreign!.exclusive;
  const records: GroupStatement<StepRecord, boolean> = { send: (items, e) => recordSteps(sql, items, leaseMs, e), conflicts: (r) => [idOf(r.key)] };
  const finals: GroupStatement<FinishRequest, StoredResponse | undefined> = {
    send: (items, e) => runFinish(sql, finish, items, e),
    conflicts: (r) => (exclusive === undefined ? [idOf(r.key)] : [idOf(r.key), `x:${exclusive(r.resume)}`]),
  };
  const releases: GroupStatement<{ key: HeldKey; resume: Resume; error: string }, boolean> = {
    send: async ([r], e) => [await releaseLease(sql, r!.key, r!.resume, r!.error, e)],
    conflicts: () => ALONE,
  };
  const parks: GroupStatement<{ key: HeldKey; reason: string }, boolean> = { send: async ([r], e) => [await parkKey(sql, r!.key, r!.reason, e)], conflicts: () => ALONE };
  const run = <I extends { key: HeldKey }, R>(name: string, statement: GroupStatement<I, R>, item: I): Promise<R> =>
    tracingOn()
      ? inTransaction(name, item.key.resume.traceparent, "idempotency_keys", () => group.run(statement, item, endsAt()))
      : group.run(statement, item, endsAt());
  return {
    record: (key, point, resume) => run("record", records, { key, point, resume }),
    finish: (key, outcome, resume) => run("finish", finals, { key, outcome, resume }),
    release: (key, resume, error) => run("release", releases, { key, resume, error }),
    park: (key, reason) => run("park", parks, { key, reason }),
  };
}

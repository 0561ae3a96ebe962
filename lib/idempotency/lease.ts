// The key row's lease, as statements: each one a transaction of its own, within the caller's
// time bound (boundedStatement), and each write a compare-and-set on the holder's token, so a
// holder whose lease was taken over can never write again (it finds no row and stops).
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import type { FinalOutcome, Operation, Resume, StoredResponse } from "./model.ts";
import { compile, runFinish, type FinishRequest, type HeldKey, type KeyRef } from "./skeleton.ts";
import type { GroupCommit, GroupStatement } from "./group-commit.ts";
import { keyId } from "./keys.ts";

interface LeaseRow {
  readonly recovery_point: string;
  readonly resume: Resume;
}

const NO_BOUND = Number.POSITIVE_INFINITY;

/**
 * Takes the lease of a STARTED key whose lease has expired (its holder died, or gave up on an
 * unknown outcome); undefined when the key is not STARTED or its lease is alive. Two takers at
 * once: the second re-reads the row after the first commits and finds the lease alive.
 */
export async function takeLease(sql: Sql, ref: KeyRef, leaseMs: number, endsAt = NO_BOUND): Promise<HeldKey | undefined> {
  const token = crypto.randomUUID();
  const [row] = await boundedStatement(sql, endsAt, (q) => q<LeaseRow[]>`
    update idempotency_keys
       set lease_token = ${token}::uuid, lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
     where tenant = ${ref.tenant} and key = ${ref.key} and endpoint = ${ref.endpoint}
       and status = 'STARTED' and lease_until <= now()
    returning recovery_point, resume`);
  return row ? { ...ref, token, point: row.recovery_point, resume: row.resume } : undefined;
}

/** One step's result to record, by its key's holder. */
export interface StepRecord {
  readonly key: HeldKey;
  readonly point: string;
  readonly resume: Resume;
}

/**
 * Records each step's result and renews its lease, for every holder that still holds its
 * key, in one statement: for each record, in order, whether it was written.
 */
export async function recordSteps(sql: Sql, records: readonly StepRecord[], leaseMs: number, endsAt = NO_BOUND): Promise<boolean[]> {
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
// A processor down for minutes is tried a few times a minute at first, then every 5 minutes.
const MAX_BACKOFF_S = 300;

/**
 * Gives the lease up after an unknown outcome, keeping the recovery point: the next request
 * with the key may resume at once; the completer waits for the key's back-off.
 */
export async function releaseLease(sql: Sql, key: HeldKey, resume: Resume, error: string, endsAt = NO_BOUND): Promise<boolean> {
  const rows = await boundedStatement(sql, endsAt, (q) => q`
    update idempotency_keys
       set lease_until = now(), lease_token = null, resume = ${q.json(resume as never)}, last_error = ${error},
           attempts = attempts + 1,
           next_attempt_at = now() + make_interval(secs => least(power(2, least(attempts, 16)), ${MAX_BACKOFF_S})::float8)
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`);
  return rows.count === 1;
}

/**
 * Parks a key whose recovery data failed its schema: its lease given up, the reason recorded
 * for the operator (`bun run ops parked`), and the completer leaves it alone.
 */
export async function parkKey(sql: Sql, key: HeldKey, reason: string, endsAt = NO_BOUND): Promise<boolean> {
  const rows = await boundedStatement(sql, endsAt, (q) => q`
    update idempotency_keys
       set lease_until = now(), lease_token = null, last_error = ${reason}, parked_at = now()
     where tenant = ${key.tenant} and key = ${key.key} and endpoint = ${key.endpoint}
       and status = 'STARTED' and lease_token = ${key.token}::uuid`);
  return rows.count === 1;
}

/**
 * Phase 3 of one key (skeleton.ts runFinish): the operation's final rows and event, and the key COMPLETED
 * with the response to replay, if `key`'s holder still holds it; undefined when the lease was
 * lost: nothing is written.
 */
export async function finishUnderLease(sql: Sql, op: Operation, key: HeldKey, outcome: FinalOutcome, resume: Resume, endsAt = NO_BOUND): Promise<StoredResponse | undefined> {
  const [response] = await runFinish(sql, compile(sql, op, "finish"), [{ key, outcome, resume }], endsAt);
  return response;
}

/** The writes of a drive, each a compare-and-set by the holder: how they reach the database is the caller's. */
export interface LeaseWrites {
  record(key: HeldKey, point: string, resume: Resume): Promise<boolean>;
  finish(key: HeldKey, outcome: FinalOutcome, resume: Resume): Promise<StoredResponse | undefined>;
  release(key: HeldKey, resume: Resume, error: string): Promise<boolean>;
  park(key: HeldKey, reason: string): Promise<boolean>;
}

/** Each write its own statement, sent at once (the completer, `bun run ops`). */
export function directWrites(sql: Sql, op: Operation, leaseMs: number): LeaseWrites {
  return {
    record: async (key, point, resume) => (await recordSteps(sql, [{ key, point, resume }], leaseMs))[0]!,
    finish: (key, outcome, resume) => finishUnderLease(sql, op, key, outcome, resume),
    release: (key, resume, error) => releaseLease(sql, key, resume, error),
    park: (key, reason) => parkKey(sql, key, reason),
  };
}

// Every release or park conflicts with every other: each is a statement of its own (rare).
const ALONE = ["alone"];
const idOf = (k: KeyRef): string => keyId(k.tenant, k.key, k.endpoint);

/**
 * The writes of a drive in the API: each grouped with the same write of other holders under
 * load (group-commit.ts), within a deadline of its own from `endsAt()` (a statement sent after
 * a processor call). One key's two writes, or two finals of one `exclusive` value, never share
 * a statement.
 */
export function groupedWrites(sql: Sql, op: Operation, group: GroupCommit, leaseMs: number, endsAt: () => number): LeaseWrites {
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
  return {
    record: (key, point, resume) => group.run(records, { key, point, resume }, endsAt()),
    finish: (key, outcome, resume) => group.run(finals, { key, outcome, resume }, endsAt()),
    release: (key, resume, error) => group.run(releases, { key, resume, error }, endsAt()),
    park: (key, reason) => group.run(parks, { key, reason }, endsAt()),
  };
}

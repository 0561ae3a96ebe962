// An operation that calls a payment processor (its `foreign` declaration), with a processor
// configured: three phases instead of one statement (docs/api.md, "Charging through a payment
// processor").
//  1. One statement like the single one (key lookup, advisory lock, admit), which writes the
//     key STARTED with a lease and a recovery point, and the operation's pending rows.
//  2. The steps (lib/shared/foreign/drive.ts), with nothing held but the lease.
//  3. One statement by the lease holder: final rows, event, stored response
//     (lib/shared/foreign/finish.ts).
// Every statement goes through the pool gate and is grouped with the same statement of other
// requests under load (group.ts), as the ledger's are (batcher.ts).
// A request that finds its key STARTED with an expired lease takes the lease over and resumes
// from the recovery point; with the lease alive it is a 409. Nothing here runs for an
// operation without `foreign`, nor in PAYMENT_PROCESSOR=none: the ledger's statement stays as it was.
import type { Static } from "@sinclair/typebox";
import type { Sql } from "../../shared/db.ts";
import { boundedStatement } from "../../shared/bounded-statement.ts";
import { drive } from "../../shared/foreign/drive.ts";
import { compileFinish, finishKeys, type FinishRequest } from "../../shared/foreign/finish.ts";
import { recordSteps, releaseLease, takeLease, type LeaseWrites, type StepRecord } from "../../shared/foreign/lease.ts";
import { findKey } from "./statement.ts";
import type { GroupCommit, GroupStatement } from "./group.ts";
import type { DriveResult, HeldKey, KeyRef, Resume, StoredResponse } from "../../shared/foreign/types.ts";
import type { ProcessorClient, UnknownCause } from "../../shared/processor/client.ts";
import { endpointOf, type ColumnValue, type ForeignDeclaration, type Fragment, type Operation, type OperationInput, type Refusal, type SqlType } from "./operation.ts";

export interface ForeignOptions {
  readonly processor: ProcessorClient;
  readonly leaseMs: number;
  /** A key taken over from a holder that is gone (idempotency_resumed_total{by="request"}). */
  readonly onResumed?: (endpoint: string) => void;
}

/** What a foreign operation answers beside the single statement's outcomes. */
export type ForeignOutcome =
  | { readonly kind: "created"; readonly status: number; readonly body: string; readonly location: string }
  | { readonly kind: "replayed"; readonly status: number; readonly body: string; readonly location: string }
  /** The processor's final refusal (a decline), stored under the key: answered as the problem it stored. */
  | { readonly kind: "stored_problem"; readonly status: number; readonly body: string; readonly replayed: boolean }
  /** The processor's outcome is unknown: nothing stored, the key resumes at its recovery point. */
  | { readonly kind: "unknown_outcome"; readonly cause: UnknownCause; readonly detail: string }
  | { readonly kind: "payload_conflict" }
  | { readonly kind: "in_flight" }
  | { readonly kind: "refused"; readonly refusal: Refusal };

/**
 * How a foreign operation's statements reach the database: grouped with the same statements
 * of other requests (group.ts), each statement within a pool-gate slot, so the gate's slots
 * stay the pool's busy connections and no step takes a connection outside it.
 */
export interface ForeignRuntime {
  readonly group: GroupCommit;
  /**
   * The end of a statement sent after a processor call: a deadline of its own, as a request's.
   * The request's began before calls whose bound is the processor's
   * (PAYMENT_PROCESSOR_TIMEOUT_MS), and the lease covers them.
   */
  stepEndsAt(): number;
}

interface CompiledForeign {
  readonly op: Operation;
  readonly foreign: ForeignDeclaration<Static<Operation["body"]>>;
  readonly endpoint: string;
  readonly record: Fragment;
  readonly admit: Fragment;
  readonly begin: Fragment;
  readonly beginStatement: GroupStatement<BeginItem, BeginRow>;
  readonly writes: LeaseWrites;
}

const CORE_COLUMNS: Readonly<Record<string, SqlType>> = { n: "int", tenant: "text", key: "text", lock_id: "bigint", request_hash: "text", resume: "text" };
const COLUMN_NAME = /^[a-z_][a-z0-9_]*$/;

// Every release conflicts with every other: each is a statement of its own.
const RELEASE_ALONE = "release";

/** A key's identity in a group's conflicts: one key's two holders never share a statement. */
const keyId = (k: KeyRef): string => `${k.tenant.length}:${k.tenant}${k.endpoint}\n${k.key}`;

export function compileForeign(sql: Sql, op: Operation, foreign: ForeignDeclaration<Static<Operation["body"]>>, runtime: ForeignRuntime, leaseMs: number): CompiledForeign {
  const record = Object.entries({ ...CORE_COLUMNS, ...foreign.columns }).map(([name, type]) => {
    if (!COLUMN_NAME.test(name)) throw new Error(`bug: operation ${op.name} declares foreign column ${name}`);
    return `${name} ${type}`;
  });
  const { admit, begin: beginSql } = foreign.sql(sql);
  const endpoint = endpointOf(op);
  const partial = { op, foreign, endpoint, record: sql.unsafe(record.join(", ")), admit, begin: beginSql };
  const beginStatement: GroupStatement<BeginItem, BeginRow> = {
    send: (items, endsAt) => begin(sql, partial, items, endsAt),
    conflicts: (item) => (item.exclusive === undefined ? [keyId({ ...item.request, endpoint })] : [keyId({ ...item.request, endpoint }), `x:${item.exclusive}`]),
  };
  return { ...partial, beginStatement, writes: groupedWrites(sql, foreign.process, runtime, leaseMs) };
}

/** The steps' writes of one process, each within the gate and grouped with other requests'. */
function groupedWrites(sql: Sql, process: ForeignDeclaration<Static<Operation["body"]>>["process"], runtime: ForeignRuntime, leaseMs: number): LeaseWrites {
  const records: GroupStatement<StepRecord, boolean> = {
    send: (items, endsAt) => recordSteps(sql, items, leaseMs, endsAt),
    conflicts: (r) => [keyId(r.key)],
  };
  const releases: GroupStatement<{ key: HeldKey; resume: Resume; error: string }, boolean> = {
    send: async ([r], endsAt) => [await releaseLease(sql, r!.key, r!.resume, r!.error, endsAt)],
    conflicts: () => [RELEASE_ALONE],
  };
  const compiled = compileFinish(sql, process);
  const finals: GroupStatement<FinishRequest, StoredResponse | undefined> = {
    send: (items, endsAt) => finishKeys(sql, compiled, items, endsAt),
    conflicts: (r) => (process.exclusive === undefined ? [keyId(r.key)] : [keyId(r.key), `x:${process.exclusive(r.resume)}`]),
  };
  return {
    record: (key, point, resume) => runtime.group.run(records, { key, point, resume }, runtime.stepEndsAt()),
    finish: (key, outcome, resume) => runtime.group.run(finals, { key, outcome, resume }, runtime.stepEndsAt()),
    // After an unknown outcome only: rare, so alone (a batch of one).
    release: (key, resume, error) => runtime.group.run(releases, { key, resume, error }, runtime.stepEndsAt()),
  };
}

export interface ForeignRequest {
  readonly tenant: string;
  readonly key: string;
  readonly lockId: string;
  readonly requestHash: string;
  readonly input: OperationInput<Static<Operation["body"]>>;
  readonly traceparent: string | null;
}

interface BeginRow {
  /** The request's place in its batch. */
  readonly n: number;
  readonly got: boolean | null;
  readonly created: number;
  readonly refusal: string | null;
  readonly detail: string | null;
  readonly request_hash: string | null;
  readonly status: "STARTED" | "COMPLETED" | null;
  readonly response_status: number | null;
  readonly response_body: string | null;
  readonly resume: Resume | null;
}

/** One request's phase 1, as a row of the statement. */
interface BeginItem {
  readonly request: ForeignRequest;
  readonly columns: Readonly<Record<string, ColumnValue>>;
  readonly resume: Resume;
  readonly token: string;
  readonly ttlSeconds: number;
  readonly leaseMs: number;
  readonly exclusive: string | undefined;
}

/**
 * Phase 1 in one statement, for one request or a batch of them (no two with one key: the
 * group's conflicts), rows back in order. A STARTED key is never overwritten, even past its
 * expiry: its payment may have moved money, and only its steps may finish it (the completer
 * parks it long before it expires). ttlSeconds and leaseMs are the process's: the first item's.
 */
async function begin(sql: Sql, c: Pick<CompiledForeign, "op" | "foreign" | "endpoint" | "record" | "admit" | "begin">, items: readonly BeginItem[], endsAt: number): Promise<BeginRow[]> {
  const first = items[0]!;
  const rows = items.map(({ request: r, columns, resume, token }, n) => ({ n, tenant: r.tenant, key: r.key, lock_id: r.lockId, request_hash: r.requestHash, resume: JSON.stringify(resume), token, ...columns }));
  const result = await boundedStatement(sql, endsAt, (q) => q<BeginRow[]>`
    with req as (
      select * from jsonb_to_recordset(${q.json(rows)}) as r(${c.record}, token uuid)
    ),
    existing as (
      select r.n, e.request_hash, e.status, e.response_status, e.response_body
        from req r
       cross join lateral (
         select request_hash, status, response_status, response_body
           from idempotency_keys
          where tenant = r.tenant and key = r.key and endpoint = ${c.endpoint} and (expires_at > now() or status = 'STARTED')
         offset 0
       ) as e
    ),
    lock as (
      select r.n, pg_try_advisory_xact_lock(r.lock_id) as got
        from req r
       where not exists (select 1 from existing x where x.n = r.n)
    ),
    ${c.admit},
    claimed as (
      insert into idempotency_keys as k
             (tenant, key, endpoint, request_hash, status, expires_at, recovery_point, lease_token, lease_until, resume)
      select r.tenant, r.key, ${c.endpoint}, r.request_hash, 'STARTED', now() + make_interval(secs => ${first.ttlSeconds}::int),
             ${c.foreign.process.firstPoint}, r.token, now() + make_interval(secs => ${first.leaseMs / 1000}::float8),
             r.resume::jsonb || coalesce(a.resume, '{}'::jsonb)
        from req r join admit a on a.n = r.n
       where a.refusal is null
      on conflict (tenant, key, endpoint) do update
         set request_hash = excluded.request_hash, status = excluded.status, response_status = null, response_body = null,
             created_at = now(), expires_at = excluded.expires_at, recovery_point = excluded.recovery_point,
             lease_token = excluded.lease_token, lease_until = excluded.lease_until, resume = excluded.resume,
             attempts = 0, next_attempt_at = null, last_error = null, parked_at = null
       where k.expires_at <= now() and k.status = 'COMPLETED'
      returning k.tenant, k.key, k.resume
    ),
    won as (
      select r.* from req r join claimed k on k.tenant = r.tenant and k.key = r.key
    ),
    ${c.begin}
    select r.n, l.got, (exists (select 1 from begun b where b.n = r.n))::int as created, a.refusal, a.detail,
           e.request_hash, e.status, e.response_status, e.response_body, k.resume
      from req r
      left join lock l on l.n = r.n
      left join admit a on a.n = r.n
      left join existing e on e.n = r.n
      left join claimed k on k.tenant = r.tenant and k.key = r.key
     order by r.n`);
  // By n, not by position: postgres.js 3.4.9 can hand the next query on a connection whose
  // previous one failed mid-stream a sparse array (porsager/postgres#1119).
  const byN: BeginRow[] = [];
  for (const row of result) if (row !== undefined) byN[row.n] = row;
  if (items.some((_, n) => byN[n] === undefined)) throw new Error(`bug: ${c.op.name}'s phase 1 returned ${result.count} rows for ${items.length} requests`);
  return byN;
}

/** Phases 1 to 3 of one request, or its resume; every expected answer a value. */
export async function runForeign(
  sql: Sql,
  c: CompiledForeign,
  r: ForeignRequest,
  options: ForeignOptions & {
    readonly ttlSeconds: number;
    /** Runs a statement before any processor call within the pool gate and the request's deadline. */
    readonly gate: <T>(work: (endsAt: number) => Promise<T>) => Promise<T>;
    /** The request's deadline (as the gate's), for phase 1's place in the group. */
    readonly endsAt: number;
    readonly runtime: ForeignRuntime;
  },
): Promise<ForeignOutcome> {
  const invalid = c.foreign.validate(r.input);
  if (invalid) {
    // A key completed before the processor was configured (the seed's body, without a payment
    // method) still replays; anything else is the 400.
    const stored = await options.gate((endsAt) => findKey(sql, r.tenant, r.key, c.endpoint, endsAt));
    if (stored?.request_hash === r.requestHash && stored.status === "COMPLETED") return fromExisting(sql, c, r, stored, options);
    return { kind: "refused", refusal: invalid };
  }
  const prepared = c.foreign.prepare(r.input, r.traceparent);
  const token = crypto.randomUUID();
  const item: BeginItem = { request: r, columns: prepared.columns, resume: prepared.resume, token, ttlSeconds: options.ttlSeconds, leaseMs: options.leaseMs, exclusive: prepared.exclusive };
  // No slot held while it queues: the group's statement takes one (group.ts).
  const row = await options.runtime.group.run(c.beginStatement, item, options.endsAt);
  const ref = { tenant: r.tenant, key: r.key, endpoint: c.endpoint };
  if (row.created === 1) {
    if (row.resume === null) throw new Error(`bug: ${c.op.name} began without a resume`);
    const held: HeldKey = { ...ref, token, point: c.foreign.process.firstPoint, resume: row.resume };
    return answer(c, await drive(sql, c.foreign.process, held, false, { ...options, writes: c.writes }));
  }
  if (row.request_hash !== null) return fromExisting(sql, c, r, row, options);
  if (row.got === false) return { kind: "in_flight" };
  // Refused, or locked but not written, on a snapshot that may predate the commit of another
  // request with this key (whose lock this one then took): what that request wrote is the answer.
  const now = await options.gate((endsAt) => findKey(sql, r.tenant, r.key, c.endpoint, endsAt));
  if (now) return fromExisting(sql, c, r, now, options);
  return row.refusal === null ? { kind: "in_flight" } : { kind: "refused", refusal: c.op.refuse(row.refusal, row.detail, r.input) };
}

type ExistingKey = Pick<BeginRow, "request_hash" | "status" | "response_status" | "response_body">;

/** A key written before: its stored answer, a 409 while its lease lives, or its resume once the lease has expired. */
async function fromExisting(sql: Sql, c: CompiledForeign, r: ForeignRequest, row: ExistingKey, options: ForeignOptions & { readonly gate: <T>(work: (endsAt: number) => Promise<T>) => Promise<T> }): Promise<ForeignOutcome> {
  if (row.request_hash !== r.requestHash) return { kind: "payload_conflict" };
  if (row.status === "COMPLETED" && row.response_status !== null && row.response_body !== null) return stored(c, row.response_status, row.response_body);
  const held = await options.gate((endsAt) => takeLease(sql, { tenant: r.tenant, key: r.key, endpoint: c.endpoint }, options.leaseMs, endsAt));
  if (held === undefined) return { kind: "in_flight" };
  options.onResumed?.(c.endpoint);
  return answer(c, await drive(sql, c.foreign.process, held, true, { ...options, writes: c.writes }));
}

function stored(c: CompiledForeign, status: number, body: string): ForeignOutcome {
  if (status === c.op.status) return { kind: "replayed", status, body, location: c.op.locationOf(body) };
  return { kind: "stored_problem", status, body, replayed: true };
}

function answer(c: CompiledForeign, result: DriveResult): ForeignOutcome {
  switch (result.kind) {
    case "final": {
      const { status, body } = result.response;
      if (status === c.op.status) return { kind: "created", status, body, location: c.op.locationOf(body) };
      return { kind: "stored_problem", status, body, replayed: false };
    }
    case "unknown":
      return { kind: "unknown_outcome", cause: result.cause, detail: result.detail };
    case "lost":
      // Another holder took the key over while this one called the processor: it answers later.
      return { kind: "in_flight" };
    default: {
      const unreachable: never = result;
      throw new Error(`bug: unhandled drive result ${JSON.stringify(unreachable)}`);
    }
  }
}

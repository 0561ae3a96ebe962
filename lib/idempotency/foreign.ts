// An operation with processor steps (its `foreign` part), with a processor configured: three
// phases instead of one statement (docs/api.md, "Charging through a payment processor").
//  1. The skeleton's statement in `processor` mode (key lookup, advisory lock, admit), which
//     writes the key STARTED with a lease and a recovery point, and the operation's pending rows.
//  2. The steps (lib/idempotency/drive.ts), with nothing held but the lease.
//  3. One statement by the lease holder: final rows, event, stored response (skeleton.ts).
// Every statement goes through the pool gate and is grouped with the same statement of other
// requests under load (group.ts), as the ledger's is. A request that finds its key STARTED
// with an expired lease takes the lease over and resumes from the recovery point; with the
// lease alive it is a 409.
import type { Static } from "@sinclair/typebox";
import type { Sql } from "../platform/db.ts";
import { drive, type DriveOptions } from "./drive.ts";
import { parkKey, recordSteps, releaseLease, takeLease, type LeaseWrites, type StepRecord } from "./lease.ts";
import type { Operation, OperationInput, Resume, StoredResponse } from "./model.ts";
import { compile, findKey, runBegin, runFinish, type Compiled, type FinishRequest, type HeldKey, type KeyRef, type KeyRow, type RequestRow } from "./skeleton.ts";
import { fromDrive, fromStored, fromUnwritten, type Outcome } from "./outcome.ts";
import type { GroupCommit, GroupStatement } from "./group-commit.ts";

export interface ForeignOptions extends Omit<DriveOptions, "writes"> {
  /** A key taken over from a holder that is gone (idempotency_resumed_total{by="request"}). */
  readonly onResumed?: (endpoint: string) => void;
}

/** How the statements reach the database: grouped (group.ts), each within a pool-gate slot. */
export interface ForeignRuntime {
  readonly group: GroupCommit;
  /** The end of a statement sent after a processor call: a deadline of its own, as a request's. */
  stepEndsAt(): number;
}

/** An operation's phases bound to one client and runtime, built once. */
export interface ForeignBinding {
  readonly c: Compiled;
  readonly begin: GroupStatement<BeginItem, KeyRow>;
  readonly writes: LeaseWrites;
}

interface BeginItem {
  readonly row: RequestRow;
  readonly conflicts: readonly string[];
}

// Every release or park conflicts with every other: each is a statement of its own (rare).
const ALONE = ["alone"];

/** A key's identity in a group's conflicts: one key's two holders never share a statement. */
export const keyId = (k: KeyRef): string => `${k.tenant.length}:${k.tenant}${k.endpoint}\n${k.key}`;

export function bindForeign(sql: Sql, op: Operation, runtime: ForeignRuntime, options: { readonly ttlSeconds: number; readonly leaseMs: number }): ForeignBinding {
  const c = compile(sql, op, "processor");
  const finish = compile(sql, op, "finish");
  const exclusive = op.foreign!.exclusive;
  const begin: GroupStatement<BeginItem, KeyRow> = {
    send: (items, endsAt) => runBegin(sql, c, options.ttlSeconds, options.leaseMs, items.map((item, n) => ({ ...item.row, n })), endsAt),
    conflicts: (item) => item.conflicts,
  };
  const records: GroupStatement<StepRecord, boolean> = { send: (items, endsAt) => recordSteps(sql, items, options.leaseMs, endsAt), conflicts: (r) => [keyId(r.key)] };
  const finals: GroupStatement<FinishRequest, StoredResponse | undefined> = {
    send: (items, endsAt) => runFinish(sql, finish, items, endsAt),
    conflicts: (r) => (exclusive === undefined ? [keyId(r.key)] : [keyId(r.key), `x:${exclusive(r.resume)}`]),
  };
  const releases: GroupStatement<{ key: HeldKey; resume: Resume; error: string }, boolean> = {
    send: async ([r], endsAt) => [await releaseLease(sql, r!.key, r!.resume, r!.error, endsAt)],
    conflicts: () => ALONE,
  };
  const parks: GroupStatement<{ key: HeldKey; reason: string }, boolean> = { send: async ([r], endsAt) => [await parkKey(sql, r!.key, r!.reason, endsAt)], conflicts: () => ALONE };
  const writes: LeaseWrites = {
    record: (key, point, resume) => runtime.group.run(records, { key, point, resume }, runtime.stepEndsAt()),
    finish: (key, outcome, resume) => runtime.group.run(finals, { key, outcome, resume }, runtime.stepEndsAt()),
    release: (key, resume, error) => runtime.group.run(releases, { key, resume, error }, runtime.stepEndsAt()),
    park: (key, reason) => runtime.group.run(parks, { key, reason }, runtime.stepEndsAt()),
  };
  return { c, begin, writes };
}

export interface ForeignRequest {
  readonly tenant: string;
  readonly key: string;
  readonly lockId: string;
  readonly requestHash: string;
  readonly input: OperationInput<Static<Operation["body"]>>;
  readonly traceparent: string | null;
}

type Gate = <T>(work: (endsAt: number) => Promise<T>) => Promise<T>;

/** Phases 1 to 3 of one request, or its resume; every expected answer a value. */
export async function runForeign(sql: Sql, b: ForeignBinding, r: ForeignRequest, options: ForeignOptions & { readonly gate: Gate; readonly endsAt: number; readonly runtime: ForeignRuntime }): Promise<Outcome> {
  const { op, endpoint } = b.c;
  const declaration = op.foreign!;
  const ref = { tenant: r.tenant, key: r.key, endpoint };
  const findNow = () => options.gate((endsAt) => findKey(sql, r.tenant, r.key, endpoint, endsAt));
  const resume = async (): Promise<Outcome> => {
    const held = await options.gate((endsAt) => takeLease(sql, ref, options.leaseMs, endsAt));
    if (held === undefined) return { kind: "in_flight" };
    options.onResumed?.(endpoint);
    return fromDrive(op, await drive(sql, op, held, true, { ...options, writes: b.writes }));
  };
  const invalid = declaration.validate(r.input);
  if (invalid) {
    // A key completed before the processor was configured (the seed's body, without a payment
    // method) still replays; anything else is the problem.
    const stored = await findNow();
    const answer = stored?.status === "COMPLETED" ? fromStored(op, stored, r.requestHash) : undefined;
    return answer !== undefined && answer !== "started" && answer.kind !== "payload_conflict" ? answer : { kind: "refused", refusal: invalid };
  }
  const prepared = declaration.prepare(r.input, r.traceparent);
  const token = crypto.randomUUID();
  const row: RequestRow = { tenant: r.tenant, key: r.key, lock_id: r.lockId, request_hash: r.requestHash, resume: JSON.stringify(prepared.resume), token, ...prepared.columns };
  const conflicts = prepared.exclusive === undefined ? [keyId(ref)] : [keyId(ref), `x:${prepared.exclusive}`];
  // No slot held while it queues: the group's statement takes one (group.ts).
  const begun = await options.runtime.group.run(b.begin, { row, conflicts }, options.endsAt);
  if (begun.created === 1) {
    if (begun.resume == null) throw new Error(`bug: ${op.name} began without a resume`);
    const held: HeldKey = { ...ref, token, point: declaration.firstPoint, resume: begun.resume };
    return fromDrive(op, await drive(sql, op, held, false, { ...options, writes: b.writes }));
  }
  const answer = await fromUnwritten(op, begun, r.requestHash, findNow, (reason, detail) => op.refuse(reason, detail, r.input));
  return answer === "started" ? resume() : answer;
}

// The completer: drives every STARTED key whose lease has expired to its final state, so that
// its event is published even if the client never comes back, and parks the keys it could not
// resolve within PAYMENT_PROCESSOR_RESOLVE_WINDOW for an operator, who resolves them here too.
// A round takes its keys' leases in one short transaction under the job's advisory lock (an
// xact lock: also behind a transaction pooler), then drives them holding nothing but the leases.
import type { Sql } from "../platform/db.ts";
import { transaction } from "../platform/tx.ts";
import type { FinalOutcome, Operation, Resume } from "./model.ts";
import { compile, runFinish, type HeldKey, type KeyRef } from "./skeleton.ts";
import type { HeldAdapter } from "./adapter.ts";
import { drive, type DriveOptions, type DriveResult } from "./drive.ts";
import { takeLease } from "./lease.ts";

export interface CompleterOptions extends DriveOptions {
  readonly lockId: bigint;
  /** Keys claimed per round. */
  readonly batch: number;
  /** Keys driven at once: their calls wait on the processor, not on this process or the database. */
  readonly parallel: number;
  readonly resolveWindowSeconds: number;
  /** The operations with processor steps, by their key's endpoint. */
  readonly operations: ReadonlyMap<string, Operation>;
}

export interface CompleterRound {
  readonly claimed: number;
  readonly finished: number;
  readonly unknown: number;
  readonly lost: number;
  readonly parked: number;
}

/** One round, or undefined when another process is running the completer. */
export async function completeRound(sql: Sql, options: CompleterOptions): Promise<CompleterRound | undefined> {
  const claim = await transaction(sql, async (tx) => {
    const [lock] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${options.lockId.toString()}::bigint) as locked`;
    if (!lock?.locked) return undefined;
    const parked = await parkUnresolved(tx as unknown as Sql, options.resolveWindowSeconds);
    const keys = await claimExpired(tx as unknown as Sql, [...options.operations.keys()], options.batch, options.leaseMs);
    return { parked, keys };
  });
  if (claim === undefined) return undefined;
  const results: DriveResult[] = [];
  const queue = [...claim.keys];
  const lane = async (): Promise<void> => {
    for (let held = queue.shift(); held !== undefined; held = queue.shift()) {
      results.push(await drive(sql, options.operations.get(held.endpoint)!, held, true, options));
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel, queue.length) }, lane));
  const count = (kind: DriveResult["kind"]) => results.filter((r) => r.kind === kind).length;
  return { claimed: claim.keys.length, finished: count("final"), unknown: count("unknown"), lost: count("lost"), parked: claim.parked + count("parked") };
}

/** Parks the STARTED keys older than the window and not held; a request with the key may still resume one. */
async function parkUnresolved(sql: Sql, windowSeconds: number): Promise<number> {
  const result = await sql`
    update idempotency_keys set parked_at = now()
     where status = 'STARTED' and parked_at is null and lease_until <= now()
       and created_at < now() - make_interval(secs => ${windowSeconds}::int)`;
  return result.count;
}

/** Takes the lease of up to `batch` expired, unparked keys whose back-off has passed, oldest lease first. */
async function claimExpired(sql: Sql, endpoints: string[], batch: number, leaseMs: number): Promise<HeldKey[]> {
  return sql<HeldKey[]>`
    update idempotency_keys k
       set lease_token = gen_random_uuid(), lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
      from (select tenant, key, endpoint
              from idempotency_keys
             where status = 'STARTED' and lease_until <= now() and parked_at is null
               and coalesce(next_attempt_at, '-infinity') <= now()
               and endpoint in ${sql(endpoints)}
             order by lease_until
             limit ${batch}
               for update skip locked) due
     where k.tenant = due.tenant and k.key = due.key and k.endpoint = due.endpoint
    returning k.tenant, k.key, k.endpoint, k.lease_token as token, k.recovery_point as point, k.resume`;
}

/** How many keys are parked now (idempotency_parked_keys). */
export async function parkedCount(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where status = 'STARTED' and parked_at is not null`;
  return row?.n ?? 0;
}

/** What the operator decided after reading the processor: drive it again, or its outcome as the processor shows it. */
export type Resolution =
  | { readonly kind: "retry" }
  | { readonly kind: "succeeded"; readonly processorId: string }
  | { readonly kind: "refused"; readonly code: string };

export type ResolveResult =
  | { readonly resolved: false; readonly reason: "not_found" | "held" }
  | { readonly resolved: true; readonly outcome: string; readonly status?: number };

/**
 * Resolves the STARTED key whose operation's own id (the first of its `operatorIds`) is `id`:
 * unparked, its lease taken (a live one is refused), then driven once now, or finished with the
 * operator's outcome as the steps would have written it.
 */
export async function resolveParked(sql: Sql, id: string, resolution: Resolution, operations: ReadonlyMap<string, Operation>, processor: HeldAdapter | undefined, leaseMs: number): Promise<ResolveResult> {
  const ref = await unparkByOwnId(sql, operations, id);
  if (ref === undefined) return { resolved: false, reason: "not_found" };
  const op = operations.get(ref.endpoint)!;
  const held = await takeLease(sql, ref, leaseMs);
  if (held === undefined) return { resolved: false, reason: "held" };
  if (resolution.kind === "retry") {
    if (processor === undefined) throw new Error("bug: a retry without a processor client");
    const result = await drive(sql, op, held, true, { processor, leaseMs });
    return result.kind === "final" ? { resolved: true, outcome: result.outcome, status: result.response.status } : { resolved: true, outcome: result.kind };
  }
  const outcome: FinalOutcome = resolution.kind;
  const { succeeded, refused } = op.foreign!.resolution;
  const patch: Resume = resolution.kind === "succeeded" ? { [succeeded]: resolution.processorId } : { [refused]: resolution.code };
  const resume = { ...held.resume, ...patch, resolvedBy: "operator" };
  const [response] = await runFinish(sql, compile(sql, op, "finish"), [{ key: held, outcome, resume }]);
  return response === undefined ? { resolved: false, reason: "held" } : { resolved: true, outcome, status: response.status };
}

/** The STARTED key whose operation's own id is `id`, unparked and due at once. */
async function unparkByOwnId(sql: Sql, operations: ReadonlyMap<string, Operation>, id: string): Promise<KeyRef | undefined> {
  const owners = [...operations].map(([endpoint, op]) => ({ endpoint, field: op.foreign!.operatorIds[0]! }));
  const [row] = await sql<KeyRef[]>`
    update idempotency_keys k set parked_at = null, next_attempt_at = null
      from jsonb_to_recordset(${sql.json(owners)}) as o(endpoint text, field text)
     where k.status = 'STARTED' and k.endpoint = o.endpoint and k.resume->>o.field = ${id.toLowerCase()}
    returning k.tenant, k.key, k.endpoint`;
  return row;
}

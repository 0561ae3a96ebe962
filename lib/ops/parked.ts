// `bun run ops parked` and `bun run ops resolve`: the operator's side of the keys the completer
// parked (docs/operations.md, "Parked idempotency keys"). Keys are named by their hash and by
// the ids their operation declares (its `operatorIds`), never by the key itself. Nothing here
// names an operation: each key's is found by its endpoint (lib/charges/index.ts).
import type { Sql } from "../platform/db.ts";
import { drive } from "../idempotency/drive.ts";
import { finishUnderLease, takeLease } from "../idempotency/lease.ts";
import { foreignOperations } from "../charges/index.ts";
import type { FinalOutcome, Operation, Resume } from "../idempotency/model.ts";
import type { ProcessorAdapter } from "../charges/processor.ts";
import { keyHash } from "../platform/redact.ts";
import { isUuid } from "../platform/uuid.ts";

interface ParkedRow {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
  readonly recovery_point: string;
  readonly resume: Resume;
  readonly attempts: number;
  readonly last_error: string | null;
  readonly created_at: Date;
  readonly parked_at: Date | null;
}

/** The parked keys, oldest first, as the operator reads them. */
export async function listParked(sql: Sql, limit: number): Promise<Record<string, unknown>[]> {
  const rows = await sql<ParkedRow[]>`
    select tenant, key, endpoint, recovery_point, resume, attempts, last_error, created_at, parked_at
      from idempotency_keys
     where status = 'STARTED' and parked_at is not null
     order by created_at
     limit ${limit}`;
  const operations = foreignOperations();
  return rows.map((r) => ({
    keyHash: keyHash(r.key),
    tenant: r.tenant,
    endpoint: r.endpoint,
    recoveryPoint: r.recovery_point,
    ...idsOf(operations.get(r.endpoint), r.resume),
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at.toISOString(),
    parkedAt: r.parked_at?.toISOString() ?? null,
  }));
}

/** The ids the key's operation declares for its operator; never the key, the payment method or the trace. */
function idsOf(op: Operation | undefined, resume: Resume): Record<string, string> {
  const ids: Record<string, string> = {};
  for (const name of op?.foreign?.operatorIds ?? []) {
    const value = resume[name];
    if (typeof value === "string") ids[name] = value;
  }
  return ids;
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
 * Resolves the STARTED key that any operation's declared ids name (`id`): its lease taken (a
 * live one is refused), then either driven once now, or finished with the operator's outcome
 * (phase 3, as the steps would have written it: the processor's object id, or its refusal
 * code, where the operation's `resolution` says).
 */
export async function resolveKey(sql: Sql, id: string, resolution: Resolution, processor: ProcessorAdapter | undefined, leaseMs: number): Promise<ResolveResult> {
  if (!isUuid(id)) return { resolved: false, reason: "not_found" };
  const operations = foreignOperations();
  // Each operation's own id: the first of its operator ids (the object its key began).
  const owners = [...operations].map(([endpoint, op]) => ({ endpoint, field: op.foreign!.operatorIds[0]! }));
  const [row] = await sql<{ tenant: string; key: string; endpoint: string }[]>`
    update idempotency_keys k set parked_at = null, next_attempt_at = null
      from jsonb_to_recordset(${sql.json(owners)}) as o(endpoint text, field text)
     where k.status = 'STARTED' and k.endpoint = o.endpoint and k.resume->>o.field = ${id.toLowerCase()}
    returning k.tenant, k.key, k.endpoint`;
  if (!row) return { resolved: false, reason: "not_found" };
  const op = operations.get(row.endpoint);
  if (op === undefined) throw new Error(`bug: a STARTED key of ${row.endpoint}`);
  const held = await takeLease(sql, row, leaseMs);
  if (held === undefined) return { resolved: false, reason: "held" };
  if (resolution.kind === "retry") {
    if (processor === undefined) throw new Error("bug: a retry without a processor client");
    const result = await drive(sql, op, held, true, { processor, leaseMs });
    return result.kind === "final" ? { resolved: true, outcome: result.outcome, status: result.response.status } : { resolved: true, outcome: result.kind };
  }
  const outcome: FinalOutcome = resolution.kind;
  const { succeeded, refused } = op.foreign!.resolution;
  const patch: Resume = resolution.kind === "succeeded" ? { [succeeded]: resolution.processorId } : { [refused]: resolution.code };
  const response = await finishUnderLease(sql, op, held, outcome, { ...held.resume, ...patch, resolvedBy: "operator" });
  return response === undefined ? { resolved: false, reason: "held" } : { resolved: true, outcome, status: response.status };
}

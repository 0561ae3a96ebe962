// `bun run ops parked` and `bun run ops resolve`: the operator's side of the keys the completer
// parked (docs/operations.md, "Parked idempotency keys"). Keys are named by their hash and by
// the ids their operation declares (its `operatorIds`), never by the key itself. Nothing here
// names an operation: each key's is found by its endpoint (lib/charges/index.ts). The one write,
// a resolution, is the engine's (lib/idempotency/completer.ts).
import type { Sql } from "../platform/db.ts";
import { resolveParked, type Resolution, type ResolveResult } from "../idempotency/completer.ts";
import { foreignOperations } from "../charges/index.ts";
import type { Operation, Resume } from "../idempotency/model.ts";
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

export type { Resolution, ResolveResult } from "../idempotency/completer.ts";

/** `bun run ops resolve <id>`: the key the id names, resolved by the engine (completer.ts resolveParked). */
export function resolveKey(sql: Sql, id: string, resolution: Resolution, processor: ProcessorAdapter | undefined, leaseMs: number): Promise<ResolveResult> {
  // Not an id: nothing to resolve (a value, not a 22P02 from the comparison).
  if (!isUuid(id)) return Promise.resolve({ resolved: false, reason: "not_found" });
  return resolveParked(sql, id, resolution, foreignOperations(), processor, leaseMs);
}

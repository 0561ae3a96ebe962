// `bun run ops parked` and `resolve`: the operator's side of the keys the completer parked. Keys
// are named by their hash and their operation's `operatorIds`, never by the key itself; the one
// write, a resolution, is the engine's (lib/idempotency/completer.ts).
import type { Sql } from "../platform/db.ts";
import { resolveParked, type Resolution, type ResolveResult } from "../idempotency/completer.ts";
import { foreignOperations } from "../charges/index.ts";
import type { ProcessorAdapter } from "../charges/processor.ts";
import { keyHash } from "../platform/redact.ts";
import { isUuid } from "../platform/uuid.ts";
import { keyEntries } from "./lists.ts";

/** The parked keys, oldest first, as the operator reads them. */
export async function listParked(sql: Sql, limit: number): Promise<Record<string, unknown>[]> {
  const rows = await keyEntries(sql, "parked-keys", {}, { limit, offset: 0 });
  const operations = foreignOperations();
  return rows.map((r) => ({
    keyHash: keyHash(r.key),
    tenant: r.tenant,
    endpoint: r.endpoint,
    recoveryPoint: r.recovery_point,
    // Never the key, the payment method or the trace.
    ...Object.fromEntries((operations.get(r.endpoint)?.foreign?.operatorIds ?? []).flatMap((name) => {
      const value = r.resume?.[name];
      return typeof value === "string" ? [[name, value] as const] : [];
    })),
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at.toISOString(),
    parkedAt: r.parked_at?.toISOString() ?? null,
  }));
}

export type { Resolution } from "../idempotency/completer.ts";

/** `bun run ops resolve <id>`: the key the id names (its charge's or refund's), resolved by the engine. */
export function resolveKey(sql: Sql, id: string, resolution: Resolution, processor: ProcessorAdapter | undefined, leaseMs: number): Promise<ResolveResult> {
  // Not an id: nothing to resolve (a value, not a 22P02 from the comparison).
  if (!isUuid(id)) return Promise.resolve({ resolved: false, reason: "not_found" });
  return resolveParked(sql, id, resolution, foreignOperations(), processor, leaseMs);
}

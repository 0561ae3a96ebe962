// A key's state per operation, as its tenant may ask for it (docs/api.md "A key's state"). One
// statement reads every operation's row through the unique index's (tenant, key) prefix, so
// another tenant's key finds no row and reads exactly as unknown.
import type { Sql } from "../platform/db.ts";
import { boundedStatement } from "../platform/bounded-statement.ts";
import { endpointOf, type Operation } from "./model.ts";

export const KEY_STATES = ["in_flight", "completed", "parked", "expired", "unknown"] as const;

/** One operation's use of a key (lib/api publishes its schema and checks every view against it). */
interface OperationState {
  readonly operation: string;
  readonly endpoint: string;
  readonly state: (typeof KEY_STATES)[number];
  readonly recoveryPoint?: string;
  readonly leaseUntil?: string;
  readonly status?: number;
  readonly location?: string;
  readonly completedAt?: string;
  readonly expiresAt?: string;
  readonly reason?: string;
}

export interface KeyState {
  readonly key: string;
  readonly operations: readonly OperationState[];
}

interface KeyStateRow {
  readonly endpoint: string;
  readonly status: "STARTED" | "COMPLETED" | "EXPIRED";
  readonly response_status: number | null;
  readonly response_body: string | null;
  readonly location: string | null;
  readonly recovery_point: string | null;
  readonly lease_until: Date | null;
  readonly parked_at: Date | null;
  readonly last_error: string | null;
  readonly completed_at: Date;
  readonly expires_at: Date;
}

/** Every row of `key` the tenant holds, at most one per operation. */
export async function readKeyRows(sql: Sql, tenant: string, key: string, endsAt: number): Promise<readonly KeyStateRow[]> {
  return boundedStatement(sql, endsAt, (q) => q<KeyStateRow[]>`
    select endpoint,
           case when status = 'COMPLETED' and expires_at <= now() then 'EXPIRED' else status end as status,
           response_status, response_body, location, recovery_point, lease_until, parked_at, last_error,
           coalesce(completed_at, created_at) as completed_at, expires_at
      from idempotency_keys
     where tenant = ${tenant} and key = ${key} and (expires_at > now() or status <> 'EXPIRED')`);
}

export function keyStateView(key: string, operations: readonly Operation[], rows: readonly KeyStateRow[]): KeyState {
  const byEndpoint = new Map(rows.map((r) => [r.endpoint, r]));
  return {
    key,
    operations: operations.map((op) => {
      const endpoint = endpointOf(op);
      const row = byEndpoint.get(endpoint);
      return { operation: op.name, endpoint, ...(row === undefined ? { state: "unknown" as const } : stateOf(op, row)) };
    }),
  };
}

type StateFields = Omit<OperationState, "operation" | "endpoint">;

function stateOf(op: Operation, row: KeyStateRow): StateFields {
  switch (row.status) {
    case "STARTED":
      if (row.parked_at !== null) return { state: "parked", reason: row.last_error ?? "parked" };
      return {
        state: "in_flight",
        ...(row.recovery_point !== null && { recoveryPoint: row.recovery_point }),
        ...(row.lease_until !== null && { leaseUntil: row.lease_until.toISOString() }),
      };
    case "COMPLETED":
      return { state: "completed", ...answered(op, row), expiresAt: row.expires_at.toISOString() };
    case "EXPIRED": {
      // A COMPLETED key past its expiry not yet a tombstone has no tombstone's end to name.
      const tombstone = row.response_body === null;
      return { state: "expired", ...answered(op, row), ...(tombstone && { expiresAt: row.expires_at.toISOString() }) };
    }
  }
}

function answered(op: Operation, row: KeyStateRow): Pick<StateFields, "status" | "location" | "completedAt"> {
  const location = row.location ?? (row.response_body !== null && row.response_status === op.status ? op.locationOf(row.response_body) : undefined);
  return {
    ...(row.response_status !== null && { status: row.response_status }),
    ...(location !== undefined && { location }),
    completedAt: row.completed_at.toISOString(),
  };
}

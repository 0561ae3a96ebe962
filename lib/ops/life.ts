// A charge's whole life, read for the operator: the charge, its refunds, every key that
// acted on it (phase, lease, processor calls, the stored answer) and its outbox rows in
// sequence with their delivery state. Read-only; one statement per table.
import type { Sql } from "../platform/db.ts";
import type { Resume } from "../idempotency/model.ts";
import { keyHash } from "../platform/redact.ts";
import { isUuid } from "../platform/uuid.ts";
import { chargeIdOfKey } from "./find.ts";
import { processorCalls, type ProcessorCall } from "./calls.ts";

export interface ChargeRow {
  readonly id: string;
  readonly tenant: string;
  readonly status: string;
  readonly amount_cents: number;
  readonly currency: string;
  readonly captured_cents: number | null;
  readonly refunded_cents: number;
  readonly pending_refund_cents: number;
  readonly processor_payment_id: string | null;
  readonly decline_code: string | null;
  readonly last_sequence: number;
  readonly created_at: Date;
}

export interface RefundRow {
  readonly id: string;
  readonly amount_cents: number;
  readonly status: string;
  readonly processor_refund_id: string | null;
  readonly failure_code: string | null;
  readonly created_at: Date;
}

export interface KeyLife {
  readonly key: string;
  readonly keyHash: string;
  readonly endpoint: string;
  readonly status: string;
  /** What the key is doing now, in words (phase 1/2/3, parked, done). */
  readonly phase: string;
  readonly recoveryPoint: string | null;
  readonly leaseUntil: Date | null;
  readonly attempts: number;
  readonly nextAttemptAt: Date | null;
  readonly lastError: string | null;
  readonly parkedAt: Date | null;
  readonly createdAt: Date;
  readonly completedAt: Date | null;
  readonly responseStatus: number | null;
  readonly responseBody: string | null;
  readonly calls: readonly ProcessorCall[];
  /** The id an operator resolves the key by: its refund's, else its charge's. */
  readonly owner: string | null;
}

export type RowState = "published" | "discarded" | "parked" | "held" | "backing off" | "pending";

export interface OutboxLife {
  readonly id: string;
  readonly sequence: number;
  readonly eventType: string;
  readonly state: RowState;
  readonly createdAt: Date;
  readonly publishedAt: Date | null;
  readonly parkedAt: Date | null;
  readonly attempts: number;
  readonly lastError: string | null;
  /** For a held row: the sequence of the parked row it waits behind. */
  readonly behind: number | null;
  readonly payload: string;
}

export interface ChargeLife {
  readonly charge: ChargeRow;
  readonly refunds: readonly RefundRow[];
  readonly keys: readonly KeyLife[];
  readonly outbox: readonly OutboxLife[];
}

/** The charge's life, or undefined when there is no such charge. */
export async function chargeLife(sql: Sql, id: string): Promise<ChargeLife | undefined> {
  if (!isUuid(id)) return undefined;
  const [charge] = await sql<ChargeRow[]>`
    select id::text, tenant, status, amount_cents, currency, captured_cents, refunded_cents, pending_refund_cents,
           processor_payment_id, decline_code, last_sequence, created_at
      from charges where id = ${id}::uuid`;
  if (charge === undefined) return undefined;
  const refunds = await sql<RefundRow[]>`
    select id::text, amount_cents, status, processor_refund_id, failure_code, created_at
      from refunds where charge_id = ${id}::uuid order by created_at`;
  return { charge, refunds, keys: await keysOf(sql, charge), outbox: await outboxOf(sql, charge.id) };
}

interface KeyRow {
  readonly key: string;
  readonly endpoint: string;
  readonly status: string;
  readonly response_status: number | null;
  readonly response_body: string | null;
  readonly created_at: Date;
  readonly recovery_point: string | null;
  readonly lease_until: Date | null;
  readonly resume: Resume | null;
  readonly attempts: number;
  readonly next_attempt_at: Date | null;
  readonly last_error: string | null;
  readonly parked_at: Date | null;
  readonly location: string | null;
  readonly completed_at: Date | null;
}

// The tenant's keys whose ids name the charge: the tenant narrows the unique index's range;
// within it the ids are read from each row (a key names its charge in its recovery data, its
// answer or its Location, not in a column of its own).
async function keysOf(sql: Sql, charge: ChargeRow): Promise<KeyLife[]> {
  const rows = await sql<KeyRow[]>`
    select key, endpoint, status, response_status, response_body, created_at, recovery_point, lease_until, resume,
           attempts, next_attempt_at, last_error, parked_at, location, completed_at
      from idempotency_keys
     where tenant = ${charge.tenant}
       and (resume->>'chargeId' = ${charge.id} or strpos(coalesce(response_body, '') || coalesce(location, ''), ${charge.id}) > 0)
     order by created_at`;
  return rows.filter((r) => chargeIdOfKey(r) === charge.id).map(keyLife);
}

function phaseOf(r: KeyRow): string {
  if (r.status === "COMPLETED") return "done: answer stored";
  if (r.status === "EXPIRED") return "tombstone: answer expired, key still spent";
  if (r.parked_at !== null) return "parked: waiting for an operator";
  if (r.recovery_point === null) return "phase 1: in flight";
  if (r.lease_until !== null && r.lease_until > new Date()) return `processor steps at "${r.recovery_point}", leased`;
  return `processor steps at "${r.recovery_point}", lease expired (the completer resumes it)`;
}

function keyLife(r: KeyRow): KeyLife {
  const phase = phaseOf(r);
  const outcome = r.status === "STARTED" ? (r.last_error ?? "not known yet") : `final (${r.response_status ?? "no"} stored)`;
  return {
    key: r.key,
    keyHash: keyHash(r.key),
    endpoint: r.endpoint,
    status: r.status,
    phase,
    recoveryPoint: r.recovery_point,
    leaseUntil: r.lease_until,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    lastError: r.last_error,
    parkedAt: r.parked_at,
    createdAt: r.created_at,
    completedAt: r.completed_at,
    responseStatus: r.response_status,
    responseBody: r.response_body,
    calls: processorCalls(r.endpoint, r.resume, outcome),
    owner: idIn(r.resume, "refundId") ?? idIn(r.resume, "chargeId"),
  };
}

interface OutboxRow {
  readonly id: string;
  readonly sequence: number;
  readonly event_type: string;
  readonly created_at: Date;
  readonly published_at: Date | null;
  readonly parked_at: Date | null;
  readonly next_attempt_at: Date | null;
  readonly attempts: number;
  readonly last_error: string | null;
  readonly payload: string;
}

async function outboxOf(sql: Sql, chargeId: string): Promise<OutboxLife[]> {
  const rows = await sql<OutboxRow[]>`
    select id::text, sequence, event_type, created_at, published_at, parked_at, next_attempt_at, attempts, last_error, payload
      from outbox where aggregate_id = ${chargeId}::uuid and aggregate_type = 'charge'
     order by sequence`;
  let parkedSequence: number | null = null;
  return rows.map((r) => {
    const state = stateOf(r, parkedSequence);
    if (state === "parked" && parkedSequence === null) parkedSequence = r.sequence;
    return {
      id: r.id, sequence: r.sequence, eventType: r.event_type, state, createdAt: r.created_at, publishedAt: r.published_at,
      parkedAt: r.parked_at, attempts: r.attempts, lastError: r.last_error, behind: state === "held" ? parkedSequence : null, payload: r.payload,
    };
  });
}

/** A row's delivery state; rows after an unpublished parked one are held by the relay's order. */
export function stateOf(r: Pick<OutboxRow, "published_at" | "parked_at" | "next_attempt_at">, parkedBefore: number | null): RowState {
  if (r.published_at !== null) return r.parked_at !== null ? "discarded" : "published";
  if (r.parked_at !== null) return "parked";
  if (parkedBefore !== null) return "held";
  return r.next_attempt_at !== null && r.next_attempt_at > new Date() ? "backing off" : "pending";
}

function idIn(resume: Resume | null, name: string): string | null {
  const value = resume?.[name];
  return typeof value === "string" ? value : null;
}

// The operator's view of a charge: found from any of its ids or keys, then its whole life (the
// charge, its refunds, every key that acted on it, its outbox rows with their delivery state).
import type { Sql } from "../platform/db.ts";
import type { Resume } from "../idempotency/model.ts";
import { keyHash } from "../platform/redact.ts";
import { isUuid } from "../platform/uuid.ts";
import { ownerOf } from "./lists.ts";

interface ChargeRow {
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

interface RefundRow {
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
  readonly owner: string | null;
}

export interface OutboxLife {
  readonly id: string;
  readonly sequence: number;
  readonly eventType: string;
  readonly state: "published" | "discarded" | "parked" | "held" | "backing off" | "pending";
  readonly createdAt: Date;
  readonly publishedAt: Date | null;
  readonly parkedAt: Date | null;
  readonly attempts: number;
  readonly lastError: string | null;
  /** For a held row: the sequence of the parked row it waits behind. */
  readonly behind: number | null;
  readonly payload: string;
}

export type ChargeLife = NonNullable<Awaited<ReturnType<typeof chargeLife>>>;

export async function chargeLife(sql: Sql, id: string) {
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

type KeyRow = Omit<KeyLife, "keyHash" | "phase" | "calls" | "owner"> & {
  readonly resume: Resume | null;
  readonly location: string | null;
};

// The tenant narrows the unique index's range; within it each row is read for the charge's id,
// since a key names its charge in its recovery data, answer or Location, not in a column.
async function keysOf(sql: Sql, charge: ChargeRow): Promise<KeyLife[]> {
  const rows = await sql<KeyRow[]>`
    select key, endpoint, status, recovery_point as "recoveryPoint", lease_until as "leaseUntil", attempts,
           next_attempt_at as "nextAttemptAt", last_error as "lastError", parked_at as "parkedAt", created_at as "createdAt",
           completed_at as "completedAt", response_status as "responseStatus", response_body as "responseBody", resume, location
      from idempotency_keys
     where tenant = ${charge.tenant}
       and (resume->>'chargeId' = ${charge.id} or strpos(coalesce(response_body, '') || coalesce(location, ''), ${charge.id}) > 0)
     order by created_at`;
  return rows.filter((r) => chargeIdOfKey(r) === charge.id).map(keyLife);
}

function phaseOf(r: KeyRow): string {
  if (r.status === "COMPLETED") return "done: answer stored";
  if (r.status === "EXPIRED") return "tombstone: answer expired, key still spent";
  if (r.parkedAt !== null) return "parked: waiting for an operator";
  if (r.recoveryPoint === null) return "phase 1: in flight";
  if (r.leaseUntil !== null && r.leaseUntil > new Date()) return `processor steps at "${r.recoveryPoint}", leased`;
  return `processor steps at "${r.recoveryPoint}", lease expired (the completer resumes it)`;
}

function keyLife(r: KeyRow): KeyLife {
  const { key, endpoint, status, resume, location: _, ...rest } = r;
  const outcome = status === "STARTED" ? (r.lastError ?? "not known yet") : `final (${r.responseStatus ?? "no"} stored)`;
  const calls = processorCalls(endpoint, resume, outcome);
  return { key, keyHash: keyHash(key), endpoint, status, phase: phaseOf(r), ...rest, calls, owner: ownerOf(resume) };
}

type OutboxRow = Omit<OutboxLife, "state" | "behind"> & { readonly nextAttemptAt: Date | null };

async function outboxOf(sql: Sql, chargeId: string): Promise<OutboxLife[]> {
  const rows = await sql<OutboxRow[]>`
    select id::text, sequence, event_type as "eventType", created_at as "createdAt", published_at as "publishedAt",
           parked_at as "parkedAt", attempts, last_error as "lastError", payload, next_attempt_at as "nextAttemptAt"
      from outbox where aggregate_id = ${chargeId}::uuid and aggregate_type = 'charge'
     order by sequence`;
  let parkedSequence: number | null = null;
  return rows.map((r) => {
    const state = stateOf(r, parkedSequence);
    if (state === "parked" && parkedSequence === null) parkedSequence = r.sequence;
    const { id, sequence, eventType, nextAttemptAt: _, lastError, payload, ...rest } = r;
    return { id, sequence, eventType, state, ...rest, lastError, behind: state === "held" ? parkedSequence : null, payload };
  });
}

/** A row's delivery state; rows after an unpublished parked one are held by the relay's order. */
function stateOf(r: OutboxRow, parkedBefore: number | null): OutboxLife["state"] {
  if (r.publishedAt !== null) return r.parkedAt !== null ? "discarded" : "published";
  if (r.parkedAt !== null) return "parked";
  if (parkedBefore !== null) return "held";
  return r.nextAttemptAt !== null && r.nextAttemptAt > new Date() ? "backing off" : "pending";
}

// A key's processor calls, their keys derived from the recovery data as lib/charges/*-steps derive
// them, one per attempt: an earlier attempt was answered 5xx, the last one's outcome is the key's.
type ProcessorCall = Readonly<Record<"call" | "processorKey" | "outcome", string>>;

interface CallPlan {
  readonly call: string;
  /** The resume member that names the object the keys are made from. */
  readonly owner: string;
  readonly attempt: string;
  readonly key: (owner: string, attempt: number) => string;
  /** The resume member whose presence says the call was answered. */
  readonly answered?: string;
}

const suffixed = (name: string) => (owner: string, attempt: number) => `${owner}:${name}:${attempt}`;

// By the key's endpoint, in the order the steps run.
const PLANS: Readonly<Record<string, readonly CallPlan[]>> = {
  "POST /charges": [
    { call: "create payment", owner: "chargeId", attempt: "createAttempt", key: suffixed("create"), answered: "paymentId" },
    { call: "confirm payment", owner: "chargeId", attempt: "confirmAttempt", key: suffixed("confirm") },
  ],
  "POST /charges/:id/refunds": [
    { call: "create refund", owner: "refundId", attempt: "refundAttempt", key: (owner, n) => (n === 0 ? `${owner}:refund` : `${owner}:refund:${n}`), answered: "processorRefundId" },
  ],
  "POST /charges/:id/capture": [{ call: "capture payment", owner: "chargeId", attempt: "captureAttempt", key: suffixed("capture") }],
  "POST /charges/:id/cancel": [{ call: "cancel payment", owner: "chargeId", attempt: "cancelAttempt", key: suffixed("cancel") }],
};

function processorCalls(endpoint: string, resume: Resume | null, keyOutcome: string): ProcessorCall[] {
  if (resume === null) return [];
  const calls: ProcessorCall[] = [];
  for (const plan of PLANS[endpoint] ?? []) {
    const owner = resume[plan.owner];
    if (typeof owner !== "string") continue;
    const last = typeof resume[plan.attempt] === "number" ? (resume[plan.attempt] as number) : 0;
    for (let n = 0; n < last; n++) calls.push({ call: plan.call, processorKey: plan.key(owner, n), outcome: "answered 5xx (stored under this key by the processor); next attempt" });
    const answered = plan.answered === undefined ? undefined : resume[plan.answered];
    const outcome = typeof answered === "string" ? `answered: ${answered}` : keyOutcome;
    calls.push({ call: plan.call, processorKey: plan.key(owner, last), outcome });
  }
  return calls;
}

export interface Found {
  readonly chargeId: string;
  readonly tenant: string;
  readonly by: "charge" | "refund" | "event" | "processor" | "key";
  /** What matched, for the list of matches (an endpoint, an event type, a refund id). */
  readonly detail: string;
}

// A key may match in several tenants and endpoints: a page of them is enough to choose from.
const MAX_MATCHES = 50;

/** Ids before keys; without a tenant a key is looked for in every tenant. */
export async function findCharges(sql: Sql, query: { readonly text: string; readonly tenant?: string }): Promise<Found[]> {
  const text = query.text.trim();
  if (text === "") return [];
  const byId = isUuid(text) ? await byUuid(sql, text.toLowerCase()) : [];
  const byProcessor = await byProcessorId(sql, text);
  const byKey = await byIdempotencyKey(sql, text, query.tenant?.trim() || undefined);
  return [...new Map([...byId, ...byProcessor, ...byKey].map((f) => [`${f.by} ${f.chargeId} ${f.detail}`, f])).values()];
}

async function byUuid(sql: Sql, id: string): Promise<Found[]> {
  return sql<Found[]>`
    select id::text as "chargeId", tenant, 'charge' as by, status as detail from charges where id = ${id}::uuid
    union all
    select charge_id::text, tenant, 'refund', id::text from refunds where id = ${id}::uuid
    union all
    select aggregate_id::text, tenant, 'event', event_type from outbox where id = ${id}::uuid and aggregate_type = 'charge'`;
}

// No index on the processor's ids: an operator's look-up reads the tables (docs/console.md says so).
async function byProcessorId(sql: Sql, text: string): Promise<Found[]> {
  return sql<Found[]>`
    select id::text as "chargeId", tenant, 'processor' as by, 'payment ' || processor_payment_id as detail from charges where processor_payment_id = ${text}
    union all
    select charge_id::text, tenant, 'processor', 'refund ' || processor_refund_id from refunds where processor_refund_id = ${text}
    limit ${MAX_MATCHES}`;
}

type KeyMatch = Pick<KeyRow, "endpoint" | "resume" | "responseBody" | "location"> & { readonly tenant: string };

async function byIdempotencyKey(sql: Sql, key: string, tenant: string | undefined): Promise<Found[]> {
  const rows = await sql<KeyMatch[]>`
    select tenant, endpoint, resume, response_body as "responseBody", location
      from idempotency_keys
     where key = ${key} ${tenant === undefined ? sql`` : sql`and tenant = ${tenant}`}
     order by created_at
     limit ${MAX_MATCHES}`;
  return rows.flatMap((r) => {
    const chargeId = chargeIdOfKey(r);
    return chargeId === undefined ? [] : [{ chargeId, tenant: r.tenant, by: "key" as const, detail: r.endpoint }];
  });
}

const CHARGE_IN_PATH = /\/charges\/([0-9a-f-]{36})/i;

function chargeIdOfKey(row: Pick<KeyMatch, "resume" | "responseBody" | "location">): string | undefined {
  const fromResume = row.resume?.chargeId;
  if (typeof fromResume === "string") return fromResume;
  const fromLocation = row.location?.match(CHARGE_IN_PATH)?.[1];
  if (fromLocation !== undefined) return fromLocation.toLowerCase();
  if (row.responseBody === null) return undefined;
  try {
    const body = JSON.parse(row.responseBody) as { chargeId?: unknown; id?: unknown } | null;
    const found = typeof body?.chargeId === "string" ? body.chargeId : body?.id;
    return typeof found === "string" && isUuid(found) ? found : undefined;
  } catch {
    return undefined;
  }
}

// Find: a key or a charge, refund, processor or event id to the charges it belongs to. A key's
// charge is read from the key row's own ids (recovery data, answer, Location), never guessed.
import type { Sql } from "../platform/db.ts";
import { isUuid } from "../platform/uuid.ts";

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

interface KeyMatch {
  readonly tenant: string;
  readonly endpoint: string;
  readonly resume: Record<string, unknown> | null;
  readonly responseBody: string | null;
  readonly location: string | null;
}

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

export function chargeIdOfKey(row: Pick<KeyMatch, "resume" | "responseBody" | "location">): string | undefined {
  const fromResume = row.resume?.chargeId;
  if (typeof fromResume === "string") return fromResume;
  const fromLocation = row.location?.match(CHARGE_IN_PATH)?.[1];
  if (fromLocation !== undefined) return fromLocation.toLowerCase();
  if (row.responseBody === null) return undefined;
  try {
    const body: unknown = JSON.parse(row.responseBody);
    if (typeof body !== "object" || body === null) return undefined;
    const { chargeId, id } = body as Record<string, unknown>;
    const found = typeof chargeId === "string" ? chargeId : id;
    return typeof found === "string" && isUuid(found) ? found : undefined;
  } catch {
    return undefined;
  }
}

// What needs a person (parked and stale keys, parked and held outbox rows), filtered and paged:
// the console's tables, its CSV export, `bun run ops list|export` and `bun run ops parked`.
import type { Sql } from "../platform/db.ts";
import type { Fragment, Resume } from "../idempotency/model.ts";
import { foreignOperations } from "../charges/index.ts";
import { keyHash } from "../platform/redact.ts";
import { staleLease } from "./sql.ts";

export const LIST_KINDS = ["parked-keys", "stale-keys", "parked-rows", "held-rows"] as const;
export type ListKind = (typeof LIST_KINDS)[number];

export const isListKind = (value: string | undefined): value is ListKind => LIST_KINDS.some((k) => k === value);

export interface ListFilter {
  readonly tenant?: string;
  /** A key's endpoint ("POST /charges") or a row's event type ("ChargeCreated"). */
  readonly operation?: string;
  readonly olderThanSeconds?: number;
}

export type Page = { readonly limit: number; readonly offset: number };

/** Flat, in the columns' order: a table row and a CSV line alike. */
export type ListRow = Readonly<Record<string, string | number | null>>;

export interface ListResult {
  readonly total: number;
  readonly rows: readonly ListRow[];
  /** What an action over this list acts on, per row (a charge or refund id, a row id, an aggregate id). */
  readonly targets: readonly string[];
}

const UNLEASED_STALE_S = 60;

const iso = (d: Date | null) => d?.toISOString() ?? null;

export async function listNeeds(sql: Sql, kind: ListKind, filter: ListFilter, page: Page): Promise<ListResult> {
  if (kind === "parked-rows") return parkedRows(sql, filter, page);
  if (kind === "held-rows") return heldRows(sql, filter, page);
  return keyList(sql, kind, filter, page);
}

interface KeyEntry {
  readonly tenant: string;
  readonly key: string;
  readonly endpoint: string;
  readonly recovery_point: string | null;
  readonly resume: Resume | null;
  readonly attempts: number;
  readonly last_error: string | null;
  readonly created_at: Date;
  readonly parked_at: Date | null;
  readonly lease_until: Date | null;
  readonly total: number;
}

function keyEntries(sql: Sql, kind: "parked-keys" | "stale-keys", f: ListFilter, page: Page): Promise<KeyEntry[]> {
  const which = kind === "parked-keys" ? sql`parked_at is not null` : sql`parked_at is null and ${staleLease(sql, UNLEASED_STALE_S)}`;
  return sql<KeyEntry[]>`
    select tenant, key, endpoint, recovery_point, resume, attempts, last_error, created_at, parked_at, lease_until,
           count(*) over ()::int as total
      from idempotency_keys
     where status = 'STARTED' and ${which}
       ${filterSql(sql, f, sql`idempotency_keys`, sql`endpoint`)}
     order by created_at
     limit ${page.limit} offset ${page.offset}`;
}

async function keyList(sql: Sql, kind: "parked-keys" | "stale-keys", f: ListFilter, page: Page): Promise<ListResult> {
  const rows = await keyEntries(sql, kind, f, page);
  return {
    total: rows[0]?.total ?? 0,
    rows: rows.map((r) => ({
      tenant: r.tenant, key: r.key, keyHash: keyHash(r.key), endpoint: r.endpoint, chargeId: str(r.resume?.chargeId), refundId: str(r.resume?.refundId),
      recoveryPoint: r.recovery_point, attempts: r.attempts, lastError: r.last_error, createdAt: iso(r.created_at), parkedAt: iso(r.parked_at), leaseUntil: iso(r.lease_until),
    })),
    targets: rows.map((r) => ownerOf(r.resume) ?? ""),
  };
}

/** `bun run ops parked`: keys by their hash and `operatorIds`, never the key, payment method or trace. */
export async function listParked(sql: Sql, limit: number): Promise<Record<string, unknown>[]> {
  const rows = await keyEntries(sql, "parked-keys", {}, { limit, offset: 0 });
  const operations = foreignOperations();
  return rows.map((r) => ({
    keyHash: keyHash(r.key),
    tenant: r.tenant,
    endpoint: r.endpoint,
    recoveryPoint: r.recovery_point,
    ...Object.fromEntries((operations.get(r.endpoint)?.foreign?.operatorIds ?? []).flatMap((name) => {
      const value = r.resume?.[name];
      return typeof value === "string" ? [[name, value] as const] : [];
    })),
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at.toISOString(),
    parkedAt: iso(r.parked_at),
  }));
}

const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

/** A key is resolved by its operation's own id: a refund's, else its charge's. */
export const ownerOf = (resume: Resume | null): string | null => str(resume?.refundId) ?? str(resume?.chargeId);

interface RowEntry {
  readonly id: string;
  readonly tenant: string;
  readonly aggregate_id: string;
  readonly sequence: number;
  readonly event_type: string;
  readonly attempts: number;
  readonly last_error: string | null;
  readonly created_at: Date;
  readonly parked_at: Date | null;
  readonly blocked_by: string | null;
  readonly total: number;
}

// Parked rows are read through their own partial index (few rows, never deleted while parked).
async function parkedRows(sql: Sql, f: ListFilter, page: Page): Promise<ListResult> {
  const rows = await sql<RowEntry[]>`
    select id::text, tenant, aggregate_id::text, sequence, event_type, attempts, last_error, created_at, parked_at, null as blocked_by,
           count(*) over ()::int as total
      from outbox
     where published_at is null and parked_at is not null
       ${filterSql(sql, f, sql`outbox`, sql`event_type`)}
     order by parked_at, id
     limit ${page.limit} offset ${page.offset}`;
  return rowResult(rows, (r) => r.id);
}

// Held rows are found from the parked ones (few), as the held gauge finds them (pendingStats).
async function heldRows(sql: Sql, f: ListFilter, page: Page): Promise<ListResult> {
  const rows = await sql<RowEntry[]>`
    select o.id::text, o.tenant, o.aggregate_id::text, o.sequence, o.event_type, o.attempts, o.last_error, o.created_at, o.parked_at,
           min(p.id::text) as blocked_by, count(*) over ()::int as total
      from outbox p
      join outbox o on o.aggregate_id = p.aggregate_id and o.aggregate_type = p.aggregate_type
     where p.published_at is null and p.parked_at is not null
       and o.sequence > p.sequence and (o.published_at is null and o.parked_at is null) is true
       ${filterSql(sql, f, sql`o`, sql`event_type`)}
     group by o.id
     order by o.created_at, o.id
     limit ${page.limit} offset ${page.offset}`;
  return rowResult(rows, (r) => r.aggregate_id);
}

function filterSql(sql: Sql, f: ListFilter, table: Fragment, operation: Fragment) {
  return sql`
    ${f.tenant ? sql`and ${table}.tenant = ${f.tenant}` : sql``}
    ${f.operation ? sql`and ${table}.${operation} = ${f.operation}` : sql``}
    and ${table}.created_at <= now() - make_interval(secs => ${f.olderThanSeconds ?? 0})`;
}

function rowResult(rows: readonly RowEntry[], target: (r: RowEntry) => string): ListResult {
  return {
    total: rows[0]?.total ?? 0,
    rows: rows.map((r) => ({
      id: r.id, tenant: r.tenant, aggregateId: r.aggregate_id, sequence: r.sequence, eventType: r.event_type, attempts: r.attempts,
      lastError: r.last_error, createdAt: iso(r.created_at), parkedAt: iso(r.parked_at), blockedBy: r.blocked_by,
    })),
    targets: rows.map(target),
  };
}

/** RFC 4180: CRLF, fields quoted when they hold a comma, quote or line break. */
export function toCsv(rows: readonly ListRow[]): string {
  if (rows.length === 0) return "";
  const columns = Object.keys(rows[0]!);
  const field = (v: string | number | null) => {
    const text = v === null ? "" : String(v);
    // A leading =, +, - or @ would be a formula to a spreadsheet: quoted with a ' first.
    const safe = /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
    return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
  };
  return [columns.join(","), ...rows.map((r) => columns.map((c) => field(r[c] ?? null)).join(","))].join("\r\n") + "\r\n";
}

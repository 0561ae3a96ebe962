// Helpers for the refund tests: POST /charges/:id/refunds and GET /charges/:id/refunds/:refundId
// through an in-process API, a charge to refund, and what the tables say afterwards.
import { expect } from "bun:test";
import type { ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/platform/db.ts";
import { postCharge, type PostOptions } from "./api.ts";
import { authHeaders, TEST_TENANT } from "./auth.ts";

/** The route template: the key's scope, as the idempotency_keys.endpoint column holds it. */
export const REFUNDS_ENDPOINT = "POST /charges/:id/refunds";

export interface RefundBody {
  readonly id: string;
  readonly chargeId: string;
  readonly amountCents: number;
  readonly createdAt: string;
}

/** POST /charges/:chargeId/refunds with a token of `options.tenant` (headers may override Authorization). */
export async function postRefund(api: ApiProcess, chargeId: string, body: string, options: PostOptions = {}): Promise<Response> {
  const auth = options.tenant === null ? {} : await authHeaders(options.tenant ?? TEST_TENANT);
  const headers: Record<string, string> = { "content-type": options.contentType ?? "application/json", ...auth, ...options.headers };
  if (options.key !== null && options.key !== undefined) headers["idempotency-key"] = options.key;
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/refunds`, { method: "POST", headers, body }));
}

/** GET /charges/:chargeId/refunds/:refundId with a token of `tenant`. */
export async function getRefund(api: ApiProcess, chargeId: string, refundId: string, tenant: string = TEST_TENANT): Promise<Response> {
  return api.fetch(new Request(`http://localhost/charges/${chargeId}/refunds/${refundId}`, { headers: await authHeaders(tenant) }));
}

/** A new charge of `amountCents` for `tenant`, through POST /charges; its id. */
export async function newCharge(api: ApiProcess, amountCents: number, tenant: string = TEST_TENANT): Promise<string> {
  const res = await postCharge(api, JSON.stringify({ amountCents }), { key: crypto.randomUUID(), tenant });
  if (res.status !== 201) throw new Error(`POST /charges answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

/** `{"amountCents": N}` */
export const refundBody = (amountCents: unknown): string => JSON.stringify({ amountCents });

export interface Written {
  readonly charges: number;
  readonly outbox: number;
  readonly keys: number;
  readonly refunds: number;
  /** sum(charges.refunded_cents) */
  readonly refundedCents: number;
  /** sum(charges.last_sequence) */
  readonly sequences: number;
}

/** Everything a request could write, summed: equal before and after means nothing was written. */
export async function written(sql: Sql): Promise<Written> {
  const [row] = await sql<Written[]>`
    select (select count(*) from charges)::int as charges,
           (select count(*) from outbox)::int as outbox,
           (select count(*) from idempotency_keys)::int as keys,
           (select count(*) from refunds)::int as refunds,
           (select coalesce(sum(refunded_cents), 0) from charges)::int as "refundedCents",
           (select coalesce(sum(last_sequence), 0) from charges)::int as sequences`;
  return row!;
}

export interface ChargeLedger {
  readonly amountCents: number;
  readonly refundedCents: number;
  /** sum(refunds.amount_cents) of the charge. */
  readonly refundsSum: number;
  readonly refunds: number;
  /** The sequences of the charge's outbox rows, ascending. */
  readonly sequences: number[];
  /** The event types of those rows, in sequence order. */
  readonly eventTypes: string[];
}

/** One charge as the tables tell it: its amount, its refunded total, its refunds and its events. */
export async function ledger(sql: Sql, chargeId: string): Promise<ChargeLedger> {
  const [row] = await sql<ChargeLedger[]>`
    select c.amount_cents as "amountCents", c.refunded_cents as "refundedCents",
           (select coalesce(sum(r.amount_cents), 0)::int from refunds r where r.charge_id = c.id) as "refundsSum",
           (select count(*)::int from refunds r where r.charge_id = c.id) as refunds,
           (select coalesce(array_agg(o.sequence order by o.sequence), '{}') from outbox o where o.aggregate_id = c.id) as sequences,
           (select coalesce(array_agg(o.event_type order by o.sequence), '{}') from outbox o where o.aggregate_id = c.id) as "eventTypes"
      from charges c where c.id = ${chargeId}::uuid`;
  if (!row) throw new Error(`no charge ${chargeId}`);
  return row;
}

/** 1, 2, …, n */
export const oneTo = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);

const PROBLEMS = "https://charges.example/problems/";

/** Asserts an RFC 9457 problem of `status` and type `slug`; its body. */
export async function expectProblem(res: Response, status: number, slug: string): Promise<Record<string, unknown>> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  const problem = (await res.json()) as Record<string, unknown>;
  expect(problem).toMatchObject({ type: PROBLEMS + slug, status });
  expect(typeof problem.title).toBe("string");
  expect(typeof problem.detail).toBe("string");
  return problem;
}

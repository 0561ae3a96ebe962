// GET /charges/:id/events: a charge's published events from the outbox, as the relay built them; it
// publishes in order, so a subscriber holding event n finds every one before it here.
import { Type as t, type Static } from "@sinclair/typebox";
import { boundedStatement } from "../platform/bounded-statement.ts";
import type { Sql } from "../platform/db.ts";
import { buildEnvelope, CHARGE, ENVELOPE_SCHEMAS } from "../charges/events.ts";
import type { RequestContext } from "./http/context.ts";
import { problemResponse } from "./problem.ts";
import { checkOf } from "./schemas.ts";

// Events per page (nearly every charge fits one), each page one bounded statement.
export const EVENTS_PAGE_SIZE = 500;
const MAX_SEQUENCE = 2_147_483_647;

export const ChargeEvents = t.Object(
  {
    events: t.Array(t.Union(Object.values(ENVELOPE_SCHEMAS)), {
      description: `The charge's published events after \`after\`, in sequence order, at most ${EVENTS_PAGE_SIZE} (a Link rel="next" names the next page); each element is byte for byte the MQTT payload the relay published`,
    }),
  },
  { description: "The charge's events, as the broker carried them" },
);

export const ChargeEventsQuery = t.Object({
  after: t.Optional(
    t.String({
      pattern: "^[0-9]{1,10}$",
      description: "Only events whose sequence is greater than this (a decimal integer, default 0: every event); a subscriber gives its aggregate's last processed sequence",
    }),
  ),
});

type EventRow = { id: string | null; eventType: string; tenant: string; sequence: number; payload: string; createdAt: string };

/** The charge's published events after `after`, up to `limit`; undefined for another tenant's or no charge. */
export async function chargeEvents(sql: Sql, tenant: string, id: string, after: number, limit: number, endsAt: number): Promise<EventRow[] | undefined> {
  const rows = await boundedStatement(sql, endsAt, (q) => q<EventRow[]>`
    select o.id, o.event_type as "eventType", o.tenant, o.sequence, o.payload,
           to_char(o.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "createdAt"
      from charges c
      left join outbox o
        on o.aggregate_id = c.id and o.aggregate_type = ${CHARGE} and o.tenant = c.tenant
       and o.published_at is not null and o.sequence > ${after}
     where c.id = ${id}::uuid and c.tenant = ${tenant}
     order by o.sequence
     limit ${limit}`);
  return rows.length === 0 ? undefined : rows.filter((row) => row.id !== null);
}

function envelopesOf(rows: readonly EventRow[], chargeId: string): string[] {
  const values = rows.map((row) => ({
    id: row.id!,
    type: row.eventType,
    aggregateId: chargeId,
    tenantId: row.tenant,
    createdAt: row.createdAt,
    sequence: row.sequence,
    data: JSON.parse(row.payload) as unknown,
  }));
  const check = checkOf(ChargeEvents);
  const body: Static<typeof ChargeEvents> = { events: values as Static<typeof ChargeEvents>["events"] };
  if (!check.Check(body)) {
    const first = check.Errors(body).First();
    throw new Error(`bug: an event does not match its envelope schema at ${first?.path || "(root)"}: ${first?.message ?? "unknown"}`);
  }
  return values.map(buildEnvelope);
}

/** Absent is 0; Elysia checked the pattern, this the range. */
function afterOf(request: Request): number | Response {
  const raw = new URL(request.url).searchParams.get("after");
  if (raw === null) return 0;
  const value = /^[0-9]{1,10}$/.test(raw) ? Number(raw) : Number.NaN;
  return Number.isInteger(value) && value <= MAX_SEQUENCE ? value : invalidAfter();
}

export function invalidAfter(): Response {
  return problemResponse("invalidQuery", `after must be a sequence, an integer from 0 to ${MAX_SEQUENCE}`, { errors: [{ field: "after", message: "not an integer from 0 to 2147483647" }] });
}

export async function chargeEventsHandler(ctx: Pick<RequestContext, "request" | "params" | "tenant" | "deps">): Promise<Response> {
  const after = afterOf(ctx.request);
  if (after instanceof Response) return after;
  const id = ctx.params.id!.toLowerCase();
  // One more than a page: whether a next page exists, without a second statement.
  const rows = await ctx.deps.core.read((sql, endsAt) => chargeEvents(sql, ctx.tenant, id, after, EVENTS_PAGE_SIZE + 1, endsAt));
  if (rows === undefined) return problemResponse("notFound", `no charge with id ${id}`);
  const page = rows.slice(0, EVENTS_PAGE_SIZE);
  const headers: Record<string, string> = { "content-type": "application/json;charset=utf-8" };
  if (rows.length > EVENTS_PAGE_SIZE) headers.link = `</charges/${id}/events?after=${page.at(-1)!.sequence}>; rel="next"`;
  return new Response(`{"events":[${envelopesOf(page, id).join(",")}]}`, { headers });
}

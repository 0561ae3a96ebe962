// GET /charges/idempotency-key: the state for each operation of the key in the Idempotency-Key header
// (docs/api.md, "A key's state", says why not the path).
import { Type as t, type Static } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../idempotency/keys.ts";
import { KEY_STATES, keyStateView, readKeyRows } from "../idempotency/key-state.ts";
import { checkOf } from "../platform/schemas.ts";
import { OPERATIONS } from "../charges/index.ts";
import { keyHashField } from "../platform/redact.ts";
import { problemResponse } from "./problem.ts";
import type { RequestContext } from "./http/context.ts";

const instant = (description: string) => t.String({ format: "date-time", description });

const KeyOperationState = t.Object(
  {
    operation: t.String({ description: "The operation's operationId (createCharge, createRefund, …)" }),
    endpoint: t.String({ description: 'The key\'s scope: the method and route template ("POST /charges")' }),
    state: t.Union(KEY_STATES.map((s) => t.Literal(s)), { description: "in_flight, completed, parked, expired (a tombstone: 410) or unknown (never used, its tombstone gone, or another tenant's)" }),
    recoveryPoint: t.Optional(t.String({ description: "in_flight: the last step recorded (with a payment processor)" })),
    leaseUntil: t.Optional(instant("in_flight: when its holder's lease ends; past it, the next request with the key resumes it")),
    status: t.Optional(t.Integer({ description: "completed, expired: the stored answer's status" })),
    location: t.Optional(t.String({ description: "completed, expired: the resource the key made" })),
    completedAt: t.Optional(instant("completed, expired: when the key completed")),
    expiresAt: t.Optional(instant("completed: when its stored answer expires (then 410); expired: when its tombstone ends (then the key is new again)")),
    reason: t.Optional(t.String({ description: "parked: why, for the operator (bun run ops parked)" })),
  },
  { description: "One operation's use of the key" },
);

export const KeyStateView = t.Object(
  {
    key: t.String({ description: "The key, as the API stores it (a UUID lowercased)" }),
    operations: t.Array(KeyOperationState, { description: "Every operation, in the route table's order" }),
  },
  { description: "The key's state for each operation" },
);
export type KeyStateView = Static<typeof KeyStateView>;

// Under /charges: the same bearer token and tenant scope it as every operation.
export const KEY_STATE_PATH = "/charges/idempotency-key";

export async function keyStateHandler(ctx: Pick<RequestContext, "request" | "tenant" | "deps" | "fields">): Promise<Response> {
  const parsed = parseIdempotencyKey(ctx.request.headers.get("idempotency-key"));
  if (!parsed.ok) return problemResponse("invalidKey", parsed.reason);
  ctx.fields.keyHash = keyHashField(parsed.key);
  const rows = await ctx.deps.core.read((sql, endsAt) => readKeyRows(sql, ctx.tenant, parsed.key, endsAt));
  const view = keyStateView(parsed.key, OPERATIONS, rows);
  const check = checkOf(KeyStateView);
  if (!check.Check(view)) throw new Error(`bug: a key's state does not match its schema at ${check.Errors(view).First()?.path ?? "(root)"}`);
  // Never cached by a shared cache: the answer is the tenant's and changes as the key does.
  return new Response(JSON.stringify(view), { headers: { "content-type": "application/json;charset=utf-8", "cache-control": "private, no-store" } });
}


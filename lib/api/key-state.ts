// GET /charges/idempotency-key: the state of the key in the request's Idempotency-Key header, for
// each operation (lib/idempotency/key-state.ts). The key travels in the header the POST sent it
// in, through the same parser (docs/api.md, "A key's state", says why not the path).
import { parseIdempotencyKey } from "../idempotency/keys.ts";
import { keyStateView, readKeyRows } from "../idempotency/key-state.ts";
import { OPERATIONS } from "../charges/index.ts";
import { keyHashField } from "../platform/redact.ts";
import { problemResponse } from "./problem.ts";
import type { RequestContext } from "./http/context.ts";

export { KeyStateView } from "../idempotency/key-state.ts";

/** The route's path: under /charges, so the same bearer token and tenant scope it as every operation. */
export const KEY_STATE_PATH = "/charges/idempotency-key";

export async function keyStateHandler(ctx: Pick<RequestContext, "request" | "tenant" | "deps" | "fields">): Promise<Response> {
  const parsed = parseIdempotencyKey(ctx.request.headers.get("idempotency-key"));
  if (!parsed.ok) return problemResponse("invalidKey", parsed.reason);
  ctx.fields.keyHash = keyHashField(parsed.key);
  const rows = await ctx.deps.core.read((sql, endsAt) => readKeyRows(sql, ctx.tenant, parsed.key, endsAt));
  const view = keyStateView(parsed.key, OPERATIONS, rows);
  // Never cached by a shared cache: the answer is the tenant's and changes as the key does.
  return new Response(JSON.stringify(view), { headers: { "content-type": "application/json;charset=utf-8", "cache-control": "private, no-store" } });
}


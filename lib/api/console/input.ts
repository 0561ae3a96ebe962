// What the console reads from a request: a form (bounded), a list's filter, a page number, a
// resolution's outcome and the page to go back to (only ever one of the console's own).
import type { ListFilter } from "../../ops/lists.ts";
import type { Resolution } from "../../idempotency/completer.ts";

const MAX_FORM_BYTES = 16 * 1024;
const MAX_FIELD_CHARS = 1000;

export async function formOf(request: Request): Promise<URLSearchParams> {
  const type = request.headers.get("content-type") ?? "";
  if (!type.startsWith("application/x-www-form-urlencoded")) return new URLSearchParams();
  const text = await request.text();
  return text.length > MAX_FORM_BYTES ? new URLSearchParams() : new URLSearchParams(text);
}

const field = (params: URLSearchParams, name: string): string | undefined => {
  const value = params.get(name)?.trim();
  return value ? value.slice(0, MAX_FIELD_CHARS) : undefined;
};

export function listFilterOf(params: URLSearchParams): ListFilter {
  const age = Number(params.get("older_than") ?? "");
  return {
    tenant: field(params, "tenant"),
    operation: field(params, "operation"),
    olderThanSeconds: Number.isSafeInteger(age) && age > 0 ? age : undefined,
  };
}

export function pageNoOf(params: URLSearchParams): number {
  const n = Number(params.get("page") ?? "1");
  return Number.isSafeInteger(n) && n >= 1 ? n : 1;
}

/** A resolve's outcome: read the processor (retry, the default), or the operator's reading of it. */
export function resolutionOf(form: URLSearchParams): Resolution | undefined | "invalid" {
  const how = form.get("outcome") ?? "retry";
  const value = field(form, "value");
  if (how === "retry") return undefined;
  if (how === "succeeded" && value) return { kind: "succeeded", processorId: value };
  if (how === "refused" && value) return { kind: "refused", code: value };
  return "invalid";
}

/** Where an action's result links back to: a console path, never another site. */
export function safeBack(back: string | null): string {
  return back !== null && /^\/console(\/|$|\?)/.test(back) && !back.startsWith("//") ? back : "/console";
}

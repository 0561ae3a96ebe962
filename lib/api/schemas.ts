// The shared schemas and the Idempotency-Key and Prefer headers, each checked by its handler's parser.
// Prefer (RFC 7240): only wait=N counts; one not in whole seconds is a 400, or the client never learns.
import { FormatRegistry, Type as t } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../idempotency/keys.ts";

export * from "../platform/schemas.ts";

const KEY_FORMAT = "idempotency-key";
const PREFER_FORMAT = "prefer";

export const IdempotencyKeyHeader = t.String({
  format: KEY_FORMAT,
  description:
    'An RFC 9651 String of 1-255 visible ASCII characters ("order-12345-payment"), or the same bare (no spaces, quotes, commas or semicolons); a UUID is compared in lowercase, any other key exactly. Unique per tenant and route.',
});

export const PreferHeader = t.String({
  format: PREFER_FORMAT,
  description:
    "RFC 7240: wait=N holds a request whose key is in flight up to N seconds (capped by the request timeout) for its outcome (Preference-Applied: wait=N); other preferences are ignored; a wait that is not whole seconds is a 400 (invalid-prefer)",
});

// Seconds at most: no request waits longer than the API's request timeout anyway.
const MAX_WAIT_DIGITS = 6;
const WAIT = /^wait\s*=\s*"?(\d{1,6})"?$/i;
const WAIT_NAME = /^wait(\s*=|$)/i;

type PreferWait =
  | { readonly kind: "none" }
  | { readonly kind: "wait"; readonly seconds: number }
  | { readonly kind: "invalid"; readonly detail: string };

export function preferredWait(header: string | null): PreferWait {
  if (header === null) return { kind: "none" };
  for (const preference of header.split(",")) {
    const token = preference.split(";")[0]!.trim();
    if (!WAIT_NAME.test(token)) continue;
    const match = WAIT.exec(token);
    if (match !== null) return { kind: "wait", seconds: Number(match[1]) };
    return { kind: "invalid", detail: `Prefer: wait must be whole seconds, from 0 to ${"9".repeat(MAX_WAIT_DIGITS)}` };
  }
  return { kind: "none" };
}

/** The headers' formats in TypeBox's registry, before any route's check is compiled (pipeline.ts). */
export function registerHeaderFormats(): void {
  FormatRegistry.Set(KEY_FORMAT, (value) => parseIdempotencyKey(value).ok);
  FormatRegistry.Set(PREFER_FORMAT, (value) => preferredWait(value).kind !== "invalid");
}

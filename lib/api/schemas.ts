// The shared schemas and the Idempotency-Key and Prefer headers, each checked by the parser the
// handler reads it with.
import { FormatRegistry, Type as t } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../idempotency/keys.ts";
import { preferredWait } from "./http/prefer.ts";

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

/** The headers' formats in TypeBox's registry, before any route's check is compiled (pipeline.ts). */
export function registerHeaderFormats(): void {
  FormatRegistry.Set(KEY_FORMAT, (value) => parseIdempotencyKey(value).ok);
  FormatRegistry.Set(PREFER_FORMAT, (value) => preferredWait(value).kind !== "invalid");
}

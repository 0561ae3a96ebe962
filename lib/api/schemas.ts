// The schemas every route shares (lib/platform/schemas.ts, where every process may import
// them) and the HTTP-only ones: the Idempotency-Key header, checked by the same parser the
// handler reads the key with.
import { FormatRegistry, Type as t } from "@sinclair/typebox";
import { parseIdempotencyKey } from "../idempotency/keys.ts";

export * from "../platform/schemas.ts";

const KEY_FORMAT = "idempotency-key";

export const IdempotencyKeyHeader = t.String({
  format: KEY_FORMAT,
  description:
    'An RFC 9651 String of 1-255 visible ASCII characters ("order-12345-payment"), or the same bare (no spaces, quotes, commas or semicolons); a UUID is compared in lowercase, any other key exactly. Unique per tenant and route.',
});

/** The key's format in TypeBox's registry, before any route's check is compiled (pipeline.ts). */
export function registerKeyFormat(): void {
  FormatRegistry.Set(KEY_FORMAT, (value) => parseIdempotencyKey(value).ok);
}

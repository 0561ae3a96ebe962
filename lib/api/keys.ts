// Idempotency-Key parsing. Accepted, and nothing else:
//   - an RFC 9651 (RFC 8941) Structured Field Item whose bare item is a String holding a
//     UUID, without parameters:  Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//   - a bare UUID, for the clients that send it so: Idempotency-Key: 8e03978e-40d5-...
// The UUID is the hyphenated 8-4-4-4-12 hex form (any version); hex case does not matter.
// The result is the lowercase canonical UUID, so every accepted spelling of one UUID is one key.
import { createHash } from "node:crypto";
import { parseItem } from "structured-headers";
import { isUuid } from "../shared/uuid.ts";

// Enough of a SHA-256 to tell one client's retries apart from another's in the logs
// (48 bits), and no way back to the key, which is a bearer of the request's identity.
const KEY_HASH_HEX_CHARS = 12;

/** What logs carry instead of an Idempotency-Key: the first hex digits of its SHA-256. */
export function keyHash(key: string): string {
  return createHash("sha256").update(key).digest("hex").slice(0, KEY_HASH_HEX_CHARS);
}

export type KeyParse =
  | { readonly ok: true; readonly key: string }
  | { readonly ok: false; readonly reason: string };

export function parseIdempotencyKey(header: string | null | undefined): KeyParse {
  if (header === null || header === undefined || header.trim() === "") {
    return { ok: false, reason: "the Idempotency-Key header is required" };
  }
  const value = header.trim();
  if (value.startsWith('"')) return fromStructuredString(value);
  if (isUuid(value)) return { ok: true, key: value.toLowerCase() };
  return { ok: false, reason: "Idempotency-Key must be a UUID, bare or as a Structured Field String" };
}

function fromStructuredString(value: string): KeyParse {
  let item: ReturnType<typeof parseItem>;
  try {
    item = parseItem(value);
  } catch {
    return { ok: false, reason: "Idempotency-Key is not a valid Structured Field String" };
  }
  const [bare, params] = item;
  if (typeof bare !== "string") {
    return { ok: false, reason: "Idempotency-Key must be a Structured Field String" };
  }
  if (params.size > 0) {
    return { ok: false, reason: "Idempotency-Key must not carry parameters" };
  }
  if (!isUuid(bare)) return { ok: false, reason: "Idempotency-Key must hold a UUID" };
  return { ok: true, key: bare.toLowerCase() };
}

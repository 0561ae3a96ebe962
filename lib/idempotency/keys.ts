// Idempotency-Key parsing. Accepted, and nothing else:
//   - an RFC 9651 (RFC 8941) Structured Field Item whose bare item is a String, without
//     parameters:  Idempotency-Key: "order-12345-payment"
//   - the same value sent bare, for the clients that send it so: Idempotency-Key: order-12345-payment
//     (bare, it cannot hold spaces, quotes, commas or semicolons: those would make it a list,
//     a parameter or a broken String).
// Either way the key is 1 to MAX_KEY_CHARS visible ASCII characters (0x21–0x7E). A UUID
// (hyphenated 8-4-4-4-12 hex, any version) is normalized to lowercase, so every spelling of
// one UUID is one key; any other key is compared exactly, case included.
import { parseItem } from "structured-headers";
import { isUuid } from "../platform/uuid.ts";

// What payment APIs accept (Stripe: 255): room for `<prefix>-retry-<uuid>` and the ids a
// client derives its keys from, and a bound on what one key row stores.
export const MAX_KEY_CHARS = 255;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;
// Bare: visible ASCII without the characters that delimit structured fields.
const BARE_FORBIDDEN = /[",;]/;

export type KeyParse =
  | { readonly ok: true; readonly key: string }
  | { readonly ok: false; readonly reason: string };

export function parseIdempotencyKey(header: string | null | undefined): KeyParse {
  if (header === null || header === undefined || header.trim() === "") {
    return { ok: false, reason: "the Idempotency-Key header is required" };
  }
  const value = header.trim();
  if (value.startsWith('"')) return fromStructuredString(value);
  if (BARE_FORBIDDEN.test(value) || !VISIBLE_ASCII.test(value)) {
    return { ok: false, reason: 'Idempotency-Key sent bare must be visible ASCII without spaces, quotes, commas or semicolons; send it as a String ("…") otherwise' };
  }
  return checked(value);
}

function fromStructuredString(value: string): KeyParse {
  let item: ReturnType<typeof parseItem>;
  try {
    item = parseItem(value);
  } catch {
    return { ok: false, reason: "Idempotency-Key is not a valid Structured Field String (a list, or an unbalanced quote?)" };
  }
  const [bare, params] = item;
  if (typeof bare !== "string") {
    return { ok: false, reason: "Idempotency-Key must be a Structured Field String" };
  }
  if (params.size > 0) {
    return { ok: false, reason: "Idempotency-Key must not carry parameters" };
  }
  return checked(bare);
}

function checked(key: string): KeyParse {
  if (key.length === 0) return { ok: false, reason: "Idempotency-Key must not be empty" };
  if (key.length > MAX_KEY_CHARS) return { ok: false, reason: `Idempotency-Key must be at most ${MAX_KEY_CHARS} characters, got ${key.length}` };
  if (!VISIBLE_ASCII.test(key)) return { ok: false, reason: "Idempotency-Key must be visible ASCII characters only (no spaces)" };
  return { ok: true, key: isUuid(key) ? key.toLowerCase() : key };
}

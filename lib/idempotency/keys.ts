// A key's identity: the Idempotency-Key header parsed, the request's fingerprint, the advisory
// lock id of (tenant, key, endpoint) and the key's id in a group commit's conflicts.
//
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
import { sha256Hex, sha256Int64 } from "../platform/sha256.ts";

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

// The request fingerprint: SHA-256 over the RFC 8785 canonical JSON of the fields an operation
// names (its path parameters and validated body fields). Whitespace and property order in the
// client's JSON never reach it, because it is computed from the validated values, not from
// the raw body.

/** What an operation puts in its fingerprint: flat, strings and finite numbers only. */
export type FingerprintFields = Readonly<Record<string, string | number>>;

export function fingerprint(fields: FingerprintFields): string {
  return sha256Hex(canonicalJson(fields));
}

/**
 * RFC 8785 canonical JSON of a flat object of strings and numbers: members sorted by name
 * (UTF-16 code units, as RFC 8785 §3.2.3 orders them), each value as JSON.stringify writes it,
 * which is what RFC 8785 prescribes for strings and finite numbers.
 * test/fingerprint.test.ts holds it equal to the canonicalize package's.
 */
export function canonicalJson(fields: FingerprintFields): string {
  const names = Object.keys(fields);
  if (names.length > 1) names.sort();
  let out = "{";
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const value = fields[name]!;
    if (typeof value === "number" && !Number.isFinite(value)) throw new Error("bug: fingerprint fields are not serializable");
    out += `${i === 0 ? "" : ","}${JSON.stringify(name)}:${JSON.stringify(value)}`;
  }
  return `${out}}`;
}

/**
 * The 64-bit advisory lock id of one (tenant, key, endpoint): the first 8 bytes of a
 * SHA-256, as the signed decimal Postgres's bigint expects. Each part is length-prefixed so
 * no two triples hash the same input. Collisions only cost a spurious 409.
 */
export function advisoryLockId(tenant: string, key: string, endpoint: string): string {
  const input = `${tenant.length}:${tenant}${endpoint.length}:${endpoint}${key.length}:${key}`;
  return sha256Int64(input).toString();
}

/** A key's identity in a group commit's conflicts: one key's two requests never share a statement. */
export const keyId = (tenant: string, key: string, endpoint: string): string => `${tenant.length}:${tenant}${endpoint}\n${key}`;

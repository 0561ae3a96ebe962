// A key's identity: the Idempotency-Key header parsed, the request's fingerprint, the advisory
// lock id of (tenant, key, endpoint) and the key's id in a group commit's conflicts.
//
// The header is an RFC 9651 Structured Field String without parameters ("order-12345"), or
// the same value bare (order-12345, so without spaces, quotes, commas or semicolons). Either
// way 1 to MAX_KEY_CHARS visible ASCII characters; a UUID is lowercased, so every spelling of
// one UUID is one key; any other key is compared exactly.
import { parseItem } from "structured-headers";
import { isUuid } from "../platform/uuid.ts";
import { sha256Hex, sha256Int64 } from "../platform/sha256.ts";

// What payment APIs accept (Stripe: 255), and a bound on what one key row stores.
export const MAX_KEY_CHARS = 255;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;
const BARE_FORBIDDEN = /[",;]/;

export type KeyParse =
  | { readonly ok: true; readonly key: string }
  | { readonly ok: false; readonly reason: string };

export function parseIdempotencyKey(header: string | null | undefined): KeyParse {
  const value = header?.trim();
  if (!value) return { ok: false, reason: "the Idempotency-Key header is required" };
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
  if (typeof bare !== "string") return { ok: false, reason: "Idempotency-Key must be a Structured Field String" };
  if (params.size > 0) return { ok: false, reason: "Idempotency-Key must not carry parameters" };
  return checked(bare);
}

function checked(key: string): KeyParse {
  if (key.length === 0) return { ok: false, reason: "Idempotency-Key must not be empty" };
  if (key.length > MAX_KEY_CHARS) return { ok: false, reason: `Idempotency-Key must be at most ${MAX_KEY_CHARS} characters, got ${key.length}` };
  if (!VISIBLE_ASCII.test(key)) return { ok: false, reason: "Idempotency-Key must be visible ASCII characters only (no spaces)" };
  return { ok: true, key: isUuid(key) ? key.toLowerCase() : key };
}

/** What an operation puts in its fingerprint: flat, strings and finite numbers only. */
export type FingerprintFields = Readonly<Record<string, string | number>>;

/** SHA-256 over the canonical JSON of the validated fields, so the client's JSON layout never counts. */
export function fingerprint(fields: FingerprintFields): string {
  return sha256Hex(canonicalJson(fields));
}

/**
 * RFC 8785 canonical JSON of a flat object: members sorted by UTF-16 code units (§3.2.3), each
 * value as JSON.stringify writes it, which RFC 8785 prescribes for strings and finite numbers.
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
 * The advisory lock id of one (tenant, key, endpoint): a SHA-256's first 8 bytes as a signed
 * bigint, each part length-prefixed so no two triples hash alike. A collision costs a spurious 409.
 */
export function advisoryLockId(tenant: string, key: string, endpoint: string): string {
  const input = `${tenant.length}:${tenant}${endpoint.length}:${endpoint}${key.length}:${key}`;
  return sha256Int64(input).toString();
}

/** A key's identity in a group commit's conflicts: one key's two requests never share a statement. */
export const keyId = (tenant: string, key: string, endpoint: string): string => `${tenant.length}:${tenant}${endpoint}\n${key}`;

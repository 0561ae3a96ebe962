// The request fingerprint: SHA-256 over the RFC 8785 canonical JSON of the fields an operation
// names (its path parameters and validated body fields). Whitespace and property order in the
// client's JSON never reach it, because it is computed from the validated values, not from
// the raw body.
import { sha256Hex, sha256Int64 } from "../platform/sha256.ts";

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

// The request fingerprint: SHA-256 over the RFC 8785 canonical JSON of the fields that
// change the charge. Whitespace and property order in the client's JSON never reach it,
// because it is computed from the validated value, not from the raw body.
import { sha256Hex, sha256Int64 } from "../shared/sha256.ts";

export interface ChargeFields {
  readonly amountCents: number;
}

export function fingerprint(fields: ChargeFields): string {
  return sha256Hex(canonicalCharge(fields.amountCents));
}

/**
 * RFC 8785 canonical JSON of `{amountCents}`: one member, so no ordering to do, and a number
 * is serialized as ECMAScript's Number.prototype.toString, which is what JSON.stringify writes
 * for any finite number; test/fingerprint.test.ts holds it equal to the canonicalize package's.
 */
export function canonicalCharge(amountCents: number): string {
  if (!Number.isFinite(amountCents)) throw new Error("bug: charge fields are not serializable");
  return `{"amountCents":${JSON.stringify(amountCents)}}`;
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

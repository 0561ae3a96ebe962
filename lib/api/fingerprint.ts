// The request fingerprint: SHA-256 over the RFC 8785 canonical JSON of the fields that
// change the charge. Whitespace and property order in the client's JSON never reach it,
// because it is computed from the validated value, not from the raw body.
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";

export interface ChargeFields {
  readonly amountCents: number;
}

export function fingerprint(fields: ChargeFields): string {
  const canonical = canonicalize({ amountCents: fields.amountCents });
  if (canonical === undefined) throw new Error("bug: charge fields are not serializable");
  return createHash("sha256").update(canonical).digest("hex");
}

/**
 * The 64-bit advisory lock id of one (key, endpoint): the first 8 bytes of a SHA-256,
 * as the signed decimal Postgres's bigint expects. Collisions only cost a spurious 409.
 */
export function advisoryLockId(key: string, endpoint: string): string {
  const digest = createHash("sha256").update(endpoint).update("\n").update(key).digest();
  return digest.readBigInt64BE(0).toString();
}

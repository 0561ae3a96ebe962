// Local tokens: dev mode's HS256 secret, kept in .data/ so a token printed by one `bun run dev`
// keeps working in the next, and the minting shared by dev mode, `bun run token` and the test kit.
// devSecret() also keeps dev mode's API_KEY_HASH_SECRET, in a file of its own.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { SignJWT } from "jose";

/** Where `bun run dev` keeps its secret (git-ignored with the rest of .data/). */
export const DEV_SECRET_FILE = new URL("../.data/auth-jwt-secret", import.meta.url).pathname;
/** The key of keyHash in dev mode's logs, kept so hashes match across its runs (API_KEY_HASH_SECRET). */
export const DEV_KEY_HASH_SECRET_FILE = new URL("../.data/api-key-hash-secret", import.meta.url).pathname;
/** The operator (the token's `sub`) of the console link dev mode prints. */
export const DEV_OPERATOR = "dev-operator";
/** The tenant of the curl dev mode prints. */
export const DEMO_TENANT = "demo";
// 32 random bytes as base64url (43 characters): the HS256 minimum the API accepts.
const SECRET_BYTES = 32;
// A local token outlives a working day, so the curl printed at start keeps working.
export const LOCAL_TOKEN_TTL_S = 24 * 3600;

/** The dev secret, created on first use (readable by its owner only). */
export function devSecret(file = DEV_SECRET_FILE): string {
  if (existsSync(file)) {
    const existing = readFileSync(file, "utf8").trim();
    if (existing.length >= SECRET_BYTES) return existing;
  }
  mkdirSync(dirname(file), { recursive: true });
  const secret = Buffer.from(crypto.getRandomValues(new Uint8Array(SECRET_BYTES))).toString("base64url");
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return secret;
}

/** The dev secret if dev mode has created one. */
export function existingDevSecret(file = DEV_SECRET_FILE): string | undefined {
  return existsSync(file) ? readFileSync(file, "utf8").trim() || undefined : undefined;
}

export interface TokenClaims {
  readonly tenant: string;
  /** The claim that carries the tenant (default `sub`; `sub` is set either way). */
  readonly tenantClaim?: string;
  readonly issuer?: string;
  readonly audience?: string;
  /** Seconds from now until `exp`; negative mints an expired token. */
  readonly ttlSeconds?: number;
  /** `nbf` this many seconds from now. */
  readonly notBeforeSeconds?: number;
  /** The OAuth `scope` claim (space-separated); `charges:operate` makes an operator's token (the console). */
  readonly scope?: string;
}

/** The scope of an operator's token: the console reads and acts across tenants with it. */
export const OPERATOR_SCOPE = "charges:operate";

/** An HS256 JWT for `tenant`, signed with `secret`. */
export function mintToken(secret: string, claims: TokenClaims): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const extra: Record<string, string> = claims.tenantClaim && claims.tenantClaim !== "sub" ? { [claims.tenantClaim]: claims.tenant } : {};
  if (claims.scope !== undefined) extra.scope = claims.scope;
  let jwt = new SignJWT(extra)
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(claims.tenant)
    .setIssuedAt(now)
    .setExpirationTime(now + (claims.ttlSeconds ?? LOCAL_TOKEN_TTL_S));
  if (claims.notBeforeSeconds !== undefined) jwt = jwt.setNotBefore(now + claims.notBeforeSeconds);
  if (claims.issuer) jwt = jwt.setIssuer(claims.issuer);
  if (claims.audience) jwt = jwt.setAudience(claims.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}

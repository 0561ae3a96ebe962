// Bearer JWT authentication of /charges with jose (Web APIs only: Bun, Deno, workerd). Each key source
// pins its algorithms, picked by the header's alg: neither `alg: none` nor algorithm confusion passes.
import { createRemoteJWKSet, customFetch, decodeProtectedHeader, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from "jose";
import { ConfigError, type AuthConfig, type TenantIds } from "../platform/config.ts";

/** The tenant of every request when AUTH_MODE=none, and of the rows written before tenants existed. */
export const IMPLICIT_TENANT = "default";

// Slack on exp and nbf: an identity provider's clock and the API's drift by a few seconds.
export const CLOCK_TOLERANCE_S = 30;
// A tenant is stored with every key and charge; a claim longer than this is not an id.
export const MAX_TENANT_CHARS = 255;
// AUTH_TENANT_IDS=ascii: printable ASCII, no space at either end, so two ids that print alike are one.
const ASCII_TENANT_ID = /^[!-~](?:[ -~]*[!-~])?$/;
// AUTH_TENANT_IDS=unicode, in NFKC: no controls (Postgres refuses NUL), format characters (bidi
// overrides reorder a printed line), other spaces, private-use code points or lone surrogates.
const UNICODE_TENANT_ID = /^[\p{L}\p{M}\p{N}\p{P}\p{S}](?:[\p{L}\p{M}\p{N}\p{P}\p{S} ]*[\p{L}\p{M}\p{N}\p{P}\p{S}])?$/u;
// Past the year 3000 (or Infinity, or negative) a time claim is no time an issuer means.
const MAX_TIME_CLAIM_S = 32_503_680_000;
const TIME_CLAIMS = ["exp", "nbf", "iat"] as const;
// RFC 8725 §3.11: another `typ` (a logout token, a JWT-secured request) must not pass as an access
// token. Compared without case or an "application/" prefix (RFC 7515 §4.1.9).
const ACCEPTED_TYPES = ["jwt", "at+jwt"];
const HMAC_ALGORITHMS = ["HS256"];
// What identity providers sign with; EdDSA under both of its JOSE names.
const JWKS_ALGORITHMS = ["RS256", "ES256", "EdDSA", "Ed25519"];
// Between refreshes an unknown kid triggers: made-up kids cannot make the API hammer the provider.
const JWKS_COOLDOWN_MS = 30_000;
// The stamp of verdicts made with AUTH_JWT_SECRET (key set stamps count fetches from 0).
const SECRET_STAMP = -1;

/** What a refusal's problem detail says (never the token); its keys are auth_failures_total's reasons. */
export const AUTH_FAILURE_DETAILS = {
  missing: "an Authorization: Bearer token is required",
  malformed: "the bearer token is not a JWT",
  algorithm: "the token's algorithm is not accepted",
  unknown_key: "the token's key is not known",
  signature: "the token's signature does not verify",
  expired: "the token has expired",
  not_yet_valid: "the token is not valid yet",
  issuer: "the token's issuer is not accepted",
  audience: "the token's audience is not accepted",
  claims: "the token lacks a required claim",
  tenant: "the token's tenant claim is not an accepted tenant id",
  type: "the token's typ is not JWT or at+jwt",
  keys_unavailable: "the keys to verify the token could not be fetched; retry later",
} as const;
export type AuthFailureReason = keyof typeof AUTH_FAILURE_DETAILS;
export const AUTH_FAILURE_REASONS = Object.keys(AUTH_FAILURE_DETAILS) as AuthFailureReason[];

export type AuthResult =
  | { readonly kind: "authenticated"; readonly tenant: string }
  | { readonly kind: "refused"; readonly reason: Exclude<AuthFailureReason, "keys_unavailable">; readonly tokenSent: boolean }
  | { readonly kind: "unavailable"; readonly reason: "keys_unavailable" };

export interface Authenticator {
  readonly mode: AuthConfig["mode"];
  authenticate(authorization: string | null): Promise<AuthResult>;
}

export type AuthOptions = { readonly jwksCooldownMs?: number };

const NO_AUTHENTICATION: Authenticator = {
  mode: "none",
  authenticate: async () => ({ kind: "authenticated", tenant: IMPLICIT_TENANT }),
};

/** Throws a ConfigError when AUTH_MODE=jwt has no key source; nothing is fetched until a request. */
export function createAuthenticator(config: AuthConfig, options: AuthOptions = {}): Authenticator {
  if (config.mode === "none") return NO_AUTHENTICATION;
  if (!config.jwtSecret && !config.jwksUrl) {
    throw new ConfigError(
      "AUTH_MODE is jwt (the default) but neither AUTH_JWT_SECRET nor AUTH_JWKS_URL is set: set one of them, or AUTH_MODE=none to serve without authentication",
    );
  }
  return jwtAuthenticator(config, options);
}

type Verified = { readonly payload: JWTPayload; readonly stamp: number };

function keySources(config: AuthConfig, options: AuthOptions) {
  const secret = config.jwtSecret ? importHmacKey(config.jwtSecret) : undefined;
  // Counts the key set's fetches: a verdict made with one set is not reused once another was fetched.
  let keySet = 0;
  const jwks = config.jwksUrl
    ? createRemoteJWKSet(new URL(config.jwksUrl), {
        cooldownDuration: options.jwksCooldownMs ?? JWKS_COOLDOWN_MS,
        [customFetch]: (url: string, init: RequestInit) => (keySet++, fetch(url, init)),
      })
    : undefined;
  const claims: JWTVerifyOptions = { issuer: config.issuer, audience: config.audience, clockTolerance: CLOCK_TOLERANCE_S, requiredClaims: ["exp"] };
  // A key set's verdict holds while its set is the fresh one jose uses; the secret never changes.
  const isCurrent = (stamp: number): boolean => stamp === SECRET_STAMP || (jwks !== undefined && jwks.fresh && stamp === keySet);
  const verify = async (token: string, alg: string | undefined): Promise<Verified | undefined> => {
    if (alg !== undefined && secret && HMAC_ALGORITHMS.includes(alg)) {
      const { payload } = await jwtVerify(token, await secret, { ...claims, algorithms: HMAC_ALGORITHMS });
      return { payload, stamp: SECRET_STAMP };
    }
    if (alg !== undefined && jwks && JWKS_ALGORITHMS.includes(alg)) {
      // Read before: a fetch during the verification makes this verdict one of the old set.
      const stamp = keySet;
      const { payload } = await jwtVerify(token, jwks as JWTVerifyGetKey, { ...claims, algorithms: JWKS_ALGORITHMS });
      return { payload, stamp };
    }
    return undefined;
  };
  return { verify, isCurrent };
}

function jwtAuthenticator(config: AuthConfig, options: AuthOptions): Authenticator {
  const { verify, isCurrent } = keySources(config, options);
  const cache = createTokenCache(CLOCK_TOLERANCE_S);
  const admit = (token: string, { payload, stamp }: Verified): AuthResult => {
    if (!hasSaneTimes(payload)) return refused("claims");
    const tenant = payload[config.tenantClaim];
    if (tenant === undefined) return refused("claims");
    // The implicit tenant's rows are AUTH_MODE=none's and those from before tenants: no token's.
    if (!isTenantId(tenant, config.tenantIds) || tenant === IMPLICIT_TENANT) return refused("tenant");
    // Always set: exp is a required claim jose checked.
    if (payload.exp !== undefined) cache.remember(token, tenant, payload.exp, stamp);
    return { kind: "authenticated", tenant };
  };

  return {
    mode: "jwt",
    async authenticate(authorization) {
      const token = bearerToken(authorization);
      if (token === undefined) return { kind: "refused", reason: "missing", tokenSent: false };
      const known = cache.get(token, isCurrent);
      if (known !== undefined) return { kind: "authenticated", tenant: known };
      let alg: string | undefined;
      try {
        const header = decodeProtectedHeader(token);
        if (!isAcceptedType(header.typ)) return refused("type");
        alg = header.alg;
      } catch {
        return refused("malformed");
      }
      try {
        const verified = await verify(token, alg);
        return verified ? admit(token, verified) : refused("algorithm");
      } catch (error) {
        return failureOf(error, alg !== undefined && HMAC_ALGORITHMS.includes(alg));
      }
    },
  };
}

/** A string of 1 to MAX_TENANT_CHARS UTF-16 units of AUTH_TENANT_IDS' set (docs/api.md, "Tenants"). */
export function isTenantId(value: unknown, ids: TenantIds = "ascii"): value is string {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_TENANT_CHARS) return false;
  if (ids === "ascii") return ASCII_TENANT_ID.test(value);
  return UNICODE_TENANT_ID.test(value) && value.normalize("NFKC") === value;
}

/** exp, nbf and iat are times an issuer can mean, iat not in the future (jose checks it only with a max age). */
function hasSaneTimes(payload: JWTPayload, nowS = Date.now() / 1000): boolean {
  for (const claim of TIME_CLAIMS) {
    const value: unknown = payload[claim];
    if (value !== undefined && (typeof value !== "number" || !Number.isFinite(value) || value < 0 || value > MAX_TIME_CLAIM_S)) return false;
  }
  return payload.iat === undefined || payload.iat <= nowS + CLOCK_TOLERANCE_S;
}

function isAcceptedType(typ: unknown): boolean {
  if (typ === undefined) return true;
  return typeof typ === "string" && ACCEPTED_TYPES.includes(typ.toLowerCase().replace(/^application\//, ""));
}

function refused(reason: Exclude<AuthFailureReason, "keys_unavailable" | "missing">): AuthResult {
  return { kind: "refused", reason, tokenSent: true };
}

// RFC 6750 §2.1 and RFC 9110 §11.1: the scheme is case-insensitive and followed by one or more spaces.
const BEARER_RE = /^bearer(?: +|$)/i;

/** A Bearer header's token: "" (malformed) when empty or more than one word; undefined when none was sent. */
function bearerToken(authorization: string | null): string | undefined {
  const value = authorization?.trim();
  if (!value || !BEARER_RE.test(value)) return undefined;
  const token = value.slice("bearer".length).trim();
  return /\s/.test(token) ? "" : token;
}

function importHmacKey(secret: string): Promise<CryptoKey> {
  const bytes = new TextEncoder().encode(secret);
  return crypto.subtle.importKey("raw", bytes, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
}

const CLAIM_FAILURES: Readonly<Record<string, "not_yet_valid" | "issuer" | "audience">> = { nbf: "not_yet_valid", iss: "issuer", aud: "audience" };

/** jose's verdict as a reason; a key set that cannot be fetched or read is the identity provider's fault. */
function failureOf(error: unknown, hmac: boolean): AuthResult {
  if (error instanceof errors.JWTExpired) return refused("expired");
  if (error instanceof errors.JWTClaimValidationFailed) return refused(CLAIM_FAILURES[error.claim] ?? "claims");
  if (error instanceof errors.JWSSignatureVerificationFailed) return refused("signature");
  if (error instanceof errors.JOSEAlgNotAllowed || error instanceof errors.JOSENotSupported) return refused("algorithm");
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) return refused("unknown_key");
  if (error instanceof errors.JWSInvalid || error instanceof errors.JWTInvalid) return refused("malformed");
  // With a shared secret nothing is fetched: anything else is a bug.
  if (hmac) throw error;
  return { kind: "unavailable", reason: "keys_unavailable" };
}

// Accepted bearer tokens by their exact text: one signature check a minute per token. Safe: nbf only
// gets easier, exp is checked on every use, a JWKS verdict is reused only while its key set is current.
export const MAX_REUSE_MS = 60_000;
// Past this the least recently used goes: a few MB at most whatever the clients send.
const MAX_TOKENS = 10_000;

type Entry = { readonly tenant: string; readonly exp: number; readonly reuseUntil: number; readonly stamp: number };

export function createTokenCache(toleranceS: number, maxTokens = MAX_TOKENS, now: () => number = Date.now) {
  // A Map iterates in insertion order: re-inserting on use keeps the least recent first.
  const entries = new Map<string, Entry>();
  // The last in the Map's order: one token sent with every request needs no re-insertion.
  let newest: Entry | undefined;
  return {
    get(token: string, isCurrent: (stamp: number) => boolean): string | undefined {
      const entry = entries.get(token);
      if (entry === undefined) return undefined;
      const ms = now();
      // jose's rule: expired when exp <= now - tolerance, now in whole seconds.
      if (ms >= entry.reuseUntil || entry.exp <= Math.floor(ms / 1000) - toleranceS || !isCurrent(entry.stamp)) {
        entries.delete(token);
        return undefined;
      }
      if (entry !== newest) {
        entries.delete(token);
        entries.set(token, entry);
        newest = entry;
      }
      return entry.tenant;
    },
    remember(token: string, tenant: string, exp: number, stamp: number): void {
      entries.delete(token);
      newest = { tenant, exp, reuseUntil: now() + MAX_REUSE_MS, stamp };
      entries.set(token, newest);
      if (entries.size > maxTokens) entries.delete(entries.keys().next().value as string);
    },
    get size() {
      return entries.size;
    },
  };
}

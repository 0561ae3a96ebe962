// Tokens for tests, chaos and the bench: one HS256 secret per test process, handed to every
// API it starts (authEnv() for a spawned api.ts, startTestApi in-process) with a key for the
// logs' keyHash, and tokens minted with it for any tenant. Authentication stays on
// everywhere; nothing here turns it off.
import { mintToken, type TokenClaims } from "../dev/token.ts";

/** This process's secret: random, so no test depends on a value written down anywhere. */
export const TEST_JWT_SECRET = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
/** The tenant postCharge and the clients act as unless told otherwise. */
export const TEST_TENANT = "tenant-a";

/** This process's key of the logs' keyHash, set as a deployment sets API_KEY_HASH_SECRET. */
export const TEST_KEY_HASH_SECRET = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");

/**
 * The environment that makes an API (in-process or spawned) accept this kit's tokens, with the
 * deployment's other secret, API_KEY_HASH_SECRET, as docs/security.md asks (a test of its
 * absence sets it empty).
 */
export function authEnv(): Record<string, string> {
  return { AUTH_JWT_SECRET: TEST_JWT_SECRET, API_KEY_HASH_SECRET: TEST_KEY_HASH_SECRET };
}

const cache = new Map<string, Promise<string>>();

/** A valid token for `tenant` (one per tenant, cached: they last a day). */
export function tokenFor(tenant: string = TEST_TENANT): Promise<string> {
  let token = cache.get(tenant);
  if (!token) {
    token = mintToken(TEST_JWT_SECRET, { tenant });
    cache.set(tenant, token);
  }
  return token;
}

/** A token with other claims (expired, not yet valid, another issuer...), signed with `secret`. */
export function mintTestToken(claims: Partial<TokenClaims>, secret = TEST_JWT_SECRET): Promise<string> {
  return mintToken(secret, { tenant: TEST_TENANT, ...claims });
}

/** `{ authorization: "Bearer …" }` for `tenant`. */
export async function authHeaders(tenant: string = TEST_TENANT): Promise<Record<string, string>> {
  return { authorization: `Bearer ${await tokenFor(tenant)}` };
}

// `bun run token <tenant> [--ttl <seconds>]`: prints an HS256 token for <tenant>, signed with
// AUTH_JWT_SECRET (or, when unset, the secret `bun run dev` keeps in .data/), with the
// issuer, audience and tenant claim the API is configured to expect. For local use: a real
// deployment gets its tokens from its identity provider.
import { configOrExit } from "./lib/platform/config.ts";
import { existingDevSecret, LOCAL_TOKEN_TTL_S, mintToken } from "./dev/token.ts";

const USAGE = "usage: bun run token <tenant> [--ttl <seconds>]";

function fail(line: string): never {
  console.error(`token: ${line}`);
  process.exit(1);
}

const args = process.argv.slice(2);
const ttlAt = args.indexOf("--ttl");
const ttlRaw = ttlAt >= 0 ? args.splice(ttlAt, 2)[1] : undefined;
const tenant = args[0];
if (!tenant || args.length !== 1 || tenant.startsWith("-")) fail(USAGE);
const ttlSeconds = ttlRaw === undefined ? LOCAL_TOKEN_TTL_S : Number(ttlRaw);
if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds <= 0) fail(`--ttl must be a positive number of seconds, got "${ttlRaw}"`);

const auth = configOrExit(process.env).auth;
const secret = auth.jwtSecret ?? existingDevSecret();
if (!secret) {
  fail("set AUTH_JWT_SECRET (the API's HS256 secret), or run `bun run dev` once to create the dev secret; with AUTH_JWKS_URL, tokens come from your identity provider");
}
console.log(await mintToken(secret, { tenant, tenantClaim: auth.tenantClaim, issuer: auth.issuer, audience: auth.audience, ttlSeconds }));

// `bun run token <tenant> [--ttl <seconds>]`: prints an HS256 token for <tenant>, signed with
// AUTH_JWT_SECRET (or, when unset, the secret `bun run dev` keeps in .data/), with the
// issuer, audience and tenant claim the API is configured to expect. For local use: a real
// deployment gets its tokens from its identity provider. A token the API would refuse (the
// implicit tenant, a tenant id it does not accept, no HS256 secret it knows) is not minted.
// `bun run token --operator <name>` prints an operator's token instead (scope charges:operate,
// `sub` the operator's name): the operator console's, which needs the secret but no tenant.
import { configOrExit } from "./lib/platform/config.ts";
import { IMPLICIT_TENANT, isTenantId, MAX_TENANT_CHARS } from "./lib/api/auth.ts";
import { existingDevSecret, LOCAL_TOKEN_TTL_S, mintToken, OPERATOR_SCOPE } from "./dev/token.ts";

const USAGE = "usage: bun run token <tenant> [--ttl <seconds>] | bun run token --operator <name> [--ttl <seconds>]";

function fail(line: string): never {
  console.error(`token: ${line}`);
  process.exit(1);
}

const args = process.argv.slice(2);
const operatorAt = args.indexOf("--operator");
const operator = operatorAt >= 0 && args.splice(operatorAt, 1).length > 0;
const ttlAt = args.indexOf("--ttl");
const ttlRaw = ttlAt >= 0 ? args.splice(ttlAt, 2)[1] : undefined;
const tenant = args[0];
if (!tenant || args.length !== 1 || tenant.startsWith("-")) fail(USAGE);
const ttlSeconds = ttlRaw === undefined ? LOCAL_TOKEN_TTL_S : Number(ttlRaw);
if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds <= 0) fail(`--ttl must be a positive number of seconds, got "${ttlRaw}"`);

const auth = configOrExit(process.env).auth;
// What the API would refuse is not minted: the same checks, in the words of its 401's reason.
// An operator's token names no tenant: the console verifies it with the secret in any AUTH_MODE.
if (!operator && auth.mode === "none") fail("AUTH_MODE=none: the API takes no token (every request is the implicit tenant's); unset AUTH_MODE to mint one");
if (!operator && tenant === IMPLICIT_TENANT) fail(`the tenant "${IMPLICIT_TENANT}" belongs to AUTH_MODE=none and the rows written before tenants; the API refuses a token that names it: pick another tenant`);
if (!isTenantId(tenant)) fail(`the API refuses this ${operator ? "name" : "tenant id"}: 1 to ${MAX_TENANT_CHARS} letters, marks, digits, punctuation, symbols or plain spaces, with no control, format or private-use characters`);
if (!auth.jwtSecret && auth.jwksUrl) fail("the API verifies tokens with AUTH_JWKS_URL only (no AUTH_JWT_SECRET): tokens come from your identity provider");
const secret = auth.jwtSecret ?? existingDevSecret();
if (!secret) {
  fail("set AUTH_JWT_SECRET (the API's HS256 secret), or run `bun run dev` once to create the dev secret; with AUTH_JWKS_URL, tokens come from your identity provider");
}
// An operator's name is the token's sub (the audit trail's "who"), set in the tenant claim too.
const scope = operator ? { scope: OPERATOR_SCOPE } : {};
console.log(await mintToken(secret, { tenant, tenantClaim: auth.tenantClaim, issuer: auth.issuer, audience: auth.audience, ttlSeconds, ...scope }));

// Who may use the console: a bearer JWT from the API's own key source (AUTH_JWT_SECRET or
// AUTH_JWKS_URL, the same issuer and audience) whose `scope` holds charges:operate. A tenant's
// token verifies but lacks the scope: 403. The token comes in the session cookie that
// /console/sign-in sets (HttpOnly, SameSite=Strict) or in an Authorization header. Forms are
// guarded against other sites by a double-submit token (a cookie and a hidden field that must
// match) and the Origin header; nothing changes state on GET.
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from "jose";
import type { AuthConfig } from "../../platform/config.ts";
import { CLOCK_TOLERANCE_S } from "../auth.ts";

export const OPERATE_SCOPE = "charges:operate";
export const SESSION_COOKIE = "console_session";
export const CSRF_COOKIE = "console_csrf";

export type Verdict =
  | { readonly kind: "operator"; readonly name: string; readonly expiresAt: number }
  /** A valid token without the scope: a tenant's. */
  | { readonly kind: "forbidden" }
  | { readonly kind: "signed-out"; readonly why: "missing" | "invalid" | "no-key-source" };

export type OperatorCheck = (token: string | undefined) => Promise<Verdict>;

/** The check for this deployment's key source; without one no token can pass. */
export function createOperatorCheck(auth: AuthConfig): OperatorCheck {
  const secret = auth.jwtSecret ? new TextEncoder().encode(auth.jwtSecret) : undefined;
  const jwks = auth.jwksUrl ? createRemoteJWKSet(new URL(auth.jwksUrl)) : undefined;
  const claims = { issuer: auth.issuer, audience: auth.audience, clockTolerance: CLOCK_TOLERANCE_S, requiredClaims: ["exp", "sub"] };
  return async (token) => {
    if (secret === undefined && jwks === undefined) return { kind: "signed-out", why: "no-key-source" };
    if (!token) return { kind: "signed-out", why: "missing" };
    const payload = await verify(token).catch(() => undefined);
    if (payload === undefined) return { kind: "signed-out", why: "invalid" };
    if (!hasScope(payload) || typeof payload.sub !== "string") return { kind: "forbidden" };
    return { kind: "operator", name: payload.sub, expiresAt: payload.exp ?? 0 };
  };

  // Each key source with its own pinned algorithms, and only access tokens (RFC 8725 §3.11),
  // as the API's authenticator does.
  async function verify(token: string): Promise<JWTPayload> {
    const { typ } = decodeProtectedHeader(token);
    if (typ !== undefined && !["jwt", "at+jwt"].includes(typ.toLowerCase().replace(/^application\//, ""))) throw new Error("not an access token");
    if (secret !== undefined) {
      try {
        return (await jwtVerify(token, secret, { ...claims, algorithms: ["HS256"] })).payload;
      } catch (error) {
        if (jwks === undefined) throw error;
      }
    }
    return (await jwtVerify(token, jwks as JWTVerifyGetKey, { ...claims, algorithms: ["RS256", "ES256", "EdDSA", "Ed25519"] })).payload;
  }
}

/** OAuth's `scope` (space-separated) or the `scp` list some providers use. */
function hasScope(payload: JWTPayload): boolean {
  const { scope, scp } = payload as { scope?: unknown; scp?: unknown };
  if (typeof scope === "string" && scope.split(/\s+/).includes(OPERATE_SCOPE)) return true;
  return Array.isArray(scp) && scp.includes(OPERATE_SCOPE);
}

export function cookiesOf(request: Request): Map<string, string> {
  const jar = new Map<string, string>();
  for (const part of (request.headers.get("cookie") ?? "").split(";")) {
    const at = part.indexOf("=");
    if (at > 0) jar.set(part.slice(0, at).trim(), decodeURIComponent(part.slice(at + 1).trim()));
  }
  return jar;
}

/** The token of the request: the session cookie, else a Bearer header. */
export function tokenOf(request: Request): string | undefined {
  const cookie = cookiesOf(request).get(SESSION_COOKIE);
  if (cookie) return cookie;
  const header = request.headers.get("authorization")?.match(/^bearer +(\S+)$/i);
  return header?.[1];
}

function cookie(request: Request, name: string, value: string, maxAgeS: number): string {
  const secure = new URL(request.url).protocol === "https:" ? "; Secure" : "";
  return `${name}=${encodeURIComponent(value)}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=${Math.max(0, Math.floor(maxAgeS))}${secure}`;
}

/** The cookies a sign-in sets: the session until the token's exp, and a fresh CSRF token. */
export function signInCookies(request: Request, token: string, expiresAt: number): string[] {
  const ttl = expiresAt - Date.now() / 1000;
  return [cookie(request, SESSION_COOKIE, token, ttl), cookie(request, CSRF_COOKIE, newCsrfToken(), ttl)];
}

export function signOutCookies(request: Request): string[] {
  return [cookie(request, SESSION_COOKIE, "", 0), cookie(request, CSRF_COOKIE, "", 0)];
}

export function newCsrfToken(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString("base64url");
}

/** The CSRF token pages put in their forms; a session without one (a Bearer caller) gets one set. */
export function csrfOf(request: Request): { token: string; setCookie: string | undefined } {
  const existing = cookiesOf(request).get(CSRF_COOKIE);
  if (existing) return { token: existing, setCookie: undefined };
  const token = newCsrfToken();
  return { token, setCookie: cookie(request, CSRF_COOKIE, token, 12 * 3600) };
}

/** Whether the request comes from the console's own pages: same origin, and (with a form) the matching token. */
export function sameOrigin(request: Request): boolean {
  const origin = request.headers.get("origin");
  // The host only: behind a proxy that ends TLS the scheme the API sees is not the browser's.
  if (origin !== null && hostOf(origin) !== new URL(request.url).host) return false;
  const site = request.headers.get("sec-fetch-site");
  return site === null || site === "same-origin" || site === "none";
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}

export function csrfMatches(request: Request, field: string | undefined): boolean {
  const expected = cookiesOf(request).get(CSRF_COOKIE);
  return expected !== undefined && expected.length > 0 && field !== undefined && timingSafeEqual(expected, field);
}

function timingSafeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

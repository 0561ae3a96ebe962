// Tokens from an identity provider: the API verifies them against the keys a local JWKS server
// publishes (RS256, ES256, EdDSA), picks up a rotated key by its new kid without a restart,
// refuses algorithm confusion (an HS256 token "signed" with the public key), and answers 503
// while the key set cannot be fetched. Real Postgres behind it.
import { afterAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose";
import { startTestApi, counts, postCharge } from "../testkit/api.ts";
import { freshDatabase } from "../testkit/services.ts";
import { freePort } from "../dev/ports.ts";

setDefaultTimeout(30_000);

interface SigningKey {
  readonly kid: string;
  readonly alg: string;
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
  readonly jwk: JWK;
}

async function signingKey(kid: string, alg: "RS256" | "ES256" | "EdDSA"): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, alg, privateKey, publicKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: "sig" } };
}

/** A fresh token each call (its own jti): no verdict on an earlier token can answer for it. */
function sign(key: SigningKey, tenant: string, kid = key.kid): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: key.alg, kid })
    .setSubject(tenant)
    .setJti(crypto.randomUUID())
    .setIssuedAt()
    .setExpirationTime("10m")
    .sign(key.privateKey);
}

// The identity provider: its published keys can be swapped, and it counts the fetches.
let published: JWK[] = [];
let fetches = 0;
const idp = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  fetch() {
    fetches++;
    return Response.json({ keys: published });
  },
});

const db = await freshDatabase("auth_jwks");
// Only the JWKS: no shared secret, so an HS256 token has no key at all.
const api = await startTestApi(db.url, { AUTH_JWT_SECRET: "", AUTH_JWKS_URL: `http://127.0.0.1:${idp.port}/.well-known/jwks.json` }, { auth: { jwksCooldownMs: 0 } });
afterAll(async () => {
  await api.close();
  await db.drop();
  await idp.stop(true);
});
beforeEach(async () => {
  await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
});

const body = '{"amountCents":4900}';
const post = (token: string) => postCharge(api, body, { key: crypto.randomUUID(), tenant: null, headers: { authorization: `Bearer ${token}` } });

async function expectRefused(res: Response): Promise<void> {
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
}

const rsa = await signingKey("rsa-1", "RS256");
const ec = await signingKey("ec-1", "ES256");
const ed = await signingKey("ed-1", "EdDSA");

describe("JWKS", () => {
  test("RS256, ES256 and EdDSA tokens verify against the published keys; the tenant is sub", async () => {
    published = [rsa.jwk, ec.jwk, ed.jwk];
    for (const [key, tenant] of [[rsa, "acme"], [ec, "globex"], [ed, "initech"]] as const) {
      expect((await post(await sign(key, tenant))).status).toBe(201);
    }
    const rows = await db.sql<{ tenant: string }[]>`select tenant from charges order by tenant`;
    expect(rows.map((r) => r.tenant)).toEqual(["acme", "globex", "initech"]);
  });

  test("key rotation: a token with the new kid is accepted without a restart (the set is fetched again)", async () => {
    published = [rsa.jwk];
    expect((await post(await sign(rsa, "acme"))).status).toBe(201);
    const rotated = await signingKey("rsa-2", "RS256");
    published = [rotated.jwk];
    const before = fetches;
    const res = await post(await sign(rotated, "acme"));
    expect(res.status).toBe(201);
    expect(fetches).toBeGreaterThan(before);
    // The retired key is gone from the refreshed set: its tokens no longer verify.
    await expectRefusedAfter(post(await sign(rsa, "acme")), 2);
  });

  test("a verified token is remembered only while its key set is current: the very same token is refused once its key is withdrawn", async () => {
    const withdrawn = await signingKey("rsa-w", "RS256");
    published = [withdrawn.jwk];
    const token = await sign(withdrawn, "acme");
    expect((await post(token)).status).toBe(201);
    expect((await post(token)).status).toBe(201);
    // The provider withdraws the key; a token with a kid jose has not seen makes it fetch the set again.
    const successor = await signingKey("rsa-s", "RS256");
    published = [successor.jwk];
    const before = fetches;
    expect((await post(await sign(successor, "acme"))).status).toBe(201);
    expect(fetches).toBeGreaterThan(before);
    await expectRefusedAfter(post(token), 3);
  });

  test("a kid the provider does not publish, even after a refresh → 401", async () => {
    published = [rsa.jwk];
    const stranger = await signingKey("nobody", "RS256");
    await expectRefused(await post(await sign(stranger, "acme")));
  });

  test("a token signed by another key under a published kid → 401", async () => {
    published = [rsa.jwk];
    const impostor = await signingKey("rsa-1", "RS256");
    await expectRefused(await post(await sign(impostor, "acme")));
  });

  test("algorithm confusion: HS256 signed with the provider's public key (PEM or JWK modulus) → 401", async () => {
    published = [rsa.jwk];
    const pem = await exportSPKI(rsa.publicKey);
    for (const secret of [pem, Buffer.from(rsa.jwk.n!, "base64url").toString("latin1")]) {
      const forged = await new SignJWT({}).setProtectedHeader({ alg: "HS256", kid: rsa.kid }).setSubject("acme").setExpirationTime("10m").sign(new TextEncoder().encode(secret));
      await expectRefused(await post(forged));
    }
  });

  test("alg none with a published kid → 401", async () => {
    published = [rsa.jwk];
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
    await expectRefused(await post(`${b64({ alg: "none", kid: rsa.kid })}.${b64({ sub: "acme", exp: Math.floor(Date.now() / 1000) + 600 })}.`));
  });

  test("the key set cannot be fetched → 503 with Retry-After, nothing written", async () => {
    const down = await startTestApi(db.url, { AUTH_JWT_SECRET: "", AUTH_JWKS_URL: `http://127.0.0.1:${await freePort()}/jwks.json` });
    try {
      const res = await postCharge(down, body, { key: crypto.randomUUID(), tenant: null, headers: { authorization: `Bearer ${await sign(rsa, "acme")}` } });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("1");
      expect(await res.json()).toMatchObject({ type: "https://charges.example/problems/service-unavailable", status: 503 });
      expect(await counts(db.sql)).toEqual({ charges: 0, outbox: 0, keys: 0 });
    } finally {
      await down.close();
    }
  });
});

/** The answer is a 401 and `charges` charges exist (the ones the test created before). */
async function expectRefusedAfter(answer: Promise<Response>, charges: number): Promise<void> {
  const res = await answer;
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  expect((await counts(db.sql)).charges).toBe(charges);
}

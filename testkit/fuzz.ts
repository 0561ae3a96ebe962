// Generators of hostile requests for the API's fuzz test (test/fuzz-api.test.ts), written as an
// attacker with or without a valid token writes them: deep nesting, long arrays, members with
// odd names, odd unicode in keys and in a token's `sub`, bad tokens, path tricks. A request is
// plain data (its token a spec minted later), so fast-check can print and replay it.
import fc from "fast-check";
import { SignJWT } from "jose";
import { TEST_JWT_SECRET } from "./auth.ts";

export type TokenSpec =
  | { readonly kind: "valid"; readonly sub: string }
  | { readonly kind: "typ"; readonly typ: string }
  | { readonly kind: "expired" | "tampered" | "alg-none" | "other-secret" | "huge" | "no-sub" }
  | { readonly kind: "raw"; readonly header: string | undefined };

export interface FuzzRequest {
  readonly method: string;
  /** The request target as written on the wire; `{charge}` stands for a charge created earlier. */
  readonly path: string;
  readonly contentType: string | undefined;
  readonly key: string | undefined;
  readonly token: TokenSpec;
  readonly body: string;
}

// The API's body limit (lib/api/body.ts MAX_BODY_BYTES): bodies are built around it.
const BODY_LIMIT = 16 * 1024;
// Characters that break a tenant id or a log line, and ones that only look odd.
const ODD_CHARACTERS = ["\u200b", "\u200d", "\u2028", "\u2029", "\u202e", "\ufeff", "\u00a0", "\u0000", "\u001b", "\u0085", "\ud800", "\ue000", "é", "😀", "\u0301", " ", '"', "\\", "/", "%"];

const odd = fc.constantFrom(...ODD_CHARACTERS);
/** Text mixing plain letters, any code unit, and the odd characters above. */
const oddText = (maxLength: number): fc.Arbitrary<string> =>
  fc.array(fc.oneof({ weight: 3, arbitrary: fc.string({ minLength: 1, maxLength: 4 }) }, { weight: 2, arbitrary: odd }, { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 3 }) }), { maxLength }).map((parts) => parts.join(""));

const tenant = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom("tenant-a", "tenant-b", "acme") },
  { weight: 1, arbitrary: fc.constantFrom("default", "", "Default", "t".repeat(255), "t".repeat(256), "é😀", "tenant\u200ba", "tenant\u2028a") },
  { weight: 3, arbitrary: oddText(40) },
);

const token: fc.Arbitrary<TokenSpec> = fc.oneof(
  { weight: 12, arbitrary: tenant.map((sub) => ({ kind: "valid" as const, sub })) },
  { weight: 1, arbitrary: fc.constantFrom("JWT", "at+jwt", "JWS", "logout+jwt", "", "application/at+jwt").map((typ) => ({ kind: "typ" as const, typ })) },
  { weight: 2, arbitrary: fc.constantFrom("expired", "tampered", "alg-none", "other-secret", "huge", "no-sub").map((kind) => ({ kind }) as TokenSpec) },
  {
    weight: 2,
    arbitrary: fc
      .oneof(fc.constant(undefined), fc.constantFrom("Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer a.b.c", "Bearer a b", "Bearer ....", "Bearer eyJhbGciOiJub25lIn0.e30."), oddText(60).map((t) => `Bearer ${t}`), fc.string({ maxLength: 200 }))
      .map((header) => ({ kind: "raw" as const, header })),
  },
);

const uuid = fc.uuid();
const pathTrick = fc.constantFrom(
  "/charges/",
  "//charges",
  "/charges/..",
  "/charges/%2e%2e/healthz",
  "/charges/../metrics",
  "/./charges",
  "/charges%00",
  "/charges/%00",
  "/charges/%ff%fe",
  "/CHARGES",
  "/Charges",
  "/%63harges",
  "/charges;x=1",
  "/charges?amountCents=1&amountCents=2",
  "/charges/{charge}/refunds/../../..",
  "/charges/{charge}%2Frefunds",
  `/charges/${"a".repeat(4000)}`,
  "*",
  "http://evil.example/charges",
  "/readyz?x=" + "%".repeat(100),
);
const path = fc.oneof(
  { weight: 20, arbitrary: fc.constant("/charges") },
  { weight: 2, arbitrary: fc.constant("/charges/{charge}/refunds") },
  { weight: 1, arbitrary: uuid.map((id) => `/charges/${id}`) },
  { weight: 1, arbitrary: fc.constant("/charges/{charge}") },
  { weight: 1, arbitrary: fc.tuple(uuid, uuid).map(([c, r]) => `/charges/${c}/refunds/${r}`) },
  { weight: 2, arbitrary: pathTrick },
  // Raw UTF-8 and percent-encoded odd text in a segment; whitespace would end the request target.
  { weight: 2, arbitrary: fc.tuple(oddText(20), fc.boolean()).map(([t, encode]) => `/charges/${encode ? encodeURIComponent(t.replace(/[\ud800-\udfff]/g, "")) : t.replace(/[\s\u0000-\u001f\u0085\u2028\u2029\u00a0]/g, "")}`) },
);

const key = fc.oneof(
  { weight: 8, arbitrary: uuid },
  { weight: 1, arbitrary: uuid.map((id) => `"${id}"`) },
  { weight: 1, arbitrary: fc.constantFrom(undefined, "", '""', '"a", "b"', "a;b=1", "commande-été", "k".repeat(256), "k".repeat(6000)) },
  // Header values cannot hold CR, LF or NUL on the wire: everything else goes, UTF-8 included.
  { weight: 2, arbitrary: oddText(40).map((t) => t.replace(/[\r\n\u0000]/g, "")) },
);

const contentType = fc.oneof(
  { weight: 10, arbitrary: fc.constant("application/json") },
  { weight: 1, arbitrary: fc.constantFrom(undefined, "application/json; charset=utf-8", "text/plain", "application/merge-patch+json", "application/json; charset=latin1", "multipart/form-data; boundary=x") },
);

const amount = fc.oneof(
  // Small amounts too, so refunds of a charge created earlier get through now and then.
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 5000 }).map(String) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 2_147_483_647 }).map(String) },
  { weight: 1, arbitrary: fc.constantFrom("0", "-1", "2147483648", "1e400", "-0", "49e2", "4900.0", "1.5", '"4900"', "null", "true", "[]", "{}", "9".repeat(400)) },
);

const validBody = fc
  .tuple(amount, fc.option(fc.constantFrom("usd", "eur", "USD", "xx", "é"), { nil: undefined, freq: 1 }), fc.option(fc.constantFrom("pm_card_visa", "", "p".repeat(300)), { nil: undefined, freq: 1 }))
  .map(([a, currency, pm]) => `{"amountCents":${a}${currency === undefined ? "" : `,"currency":${JSON.stringify(currency)}`}${pm === undefined ? "" : `,"paymentMethod":${JSON.stringify(pm)}`}}`);

// Deep nesting: the 8,000 brackets of issue 43, and every depth up to past the body limit.
const deep = fc.tuple(fc.integer({ min: 1, max: 9000 }), fc.constantFrom("[", '{"a":', '[{"a":'), fc.boolean()).map(([depth, open, wrapped]) => {
  const close = open === "[" ? "]" : open === '{"a":' ? "}" : "}]";
  const inner = `${open.repeat(depth)}1${close.repeat(depth)}`;
  return wrapped ? `{"amountCents":${inner}}` : inner;
});

// Long arrays of what fails the schema one element at a time: each is one error to report.
const longArray = fc.tuple(fc.integer({ min: 1, max: 4000 }), fc.constantFrom("1.5", "-1", '"x"', "null", "{}", "1e9")).map(([n, item]) => {
  const items = Array.from({ length: n }, () => item).join(",");
  return `{"amountCents":[${items}]}`.slice(0, BODY_LIMIT - 2) + "]}";
});

// Many members: unknown names (each one an error), odd unicode names, one name twice.
const manyMembers = fc.tuple(fc.array(oddText(12), { maxLength: 60 }), fc.integer({ min: 0, max: 2500 }), fc.boolean()).map(([names, filler, duplicate]) => {
  const members = ['"amountCents":100', ...names.map((n, i) => `${JSON.stringify(n)}:${i}`), ...Array.from({ length: filler }, (_, i) => `"f${i}":1`)];
  if (duplicate) members.push('"amount\\u0043ents":5000');
  return `{${members.join(",")}}`;
});

const body = fc.oneof(
  // Near-valid bodies are where a row could slip in behind a refusal: the most of them.
  { weight: 14, arbitrary: validBody },
  { weight: 3, arbitrary: deep },
  { weight: 2, arbitrary: longArray },
  { weight: 2, arbitrary: manyMembers },
  { weight: 2, arbitrary: fc.json({ maxDepth: 8 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify({ amountCents: v })) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 300 }) },
  { weight: 1, arbitrary: validBody.chain((b) => fc.integer({ min: 0, max: b.length }).map((n) => b.slice(0, n))) },
  { weight: 1, arbitrary: fc.integer({ min: BODY_LIMIT - 8, max: BODY_LIMIT + 64 }).map((n) => `{"amountCents":1,"pad":"${"x".repeat(n)}"}`) },
);

// Methods Bun's HTTP parser knows: it closes the connection on an unknown one before the API
// sees the request, which nothing in this project decides.
const method = fc.oneof({ weight: 20, arbitrary: fc.constant("POST") }, { weight: 3, arbitrary: fc.constant("GET") }, { weight: 1, arbitrary: fc.constantFrom("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE") });

export const fuzzRequest: fc.Arbitrary<FuzzRequest> = fc.record({ method, path, contentType, key, token, body });

const secret = new TextEncoder().encode(TEST_JWT_SECRET);
const base64url = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString("base64url");

/** The Authorization header a spec stands for (undefined: none), signed with the test kit's secret. */
export async function authorizationOf(spec: TokenSpec): Promise<string | undefined> {
  const now = Math.floor(Date.now() / 1000);
  const sign = (claims: Record<string, unknown>, header: Record<string, unknown> = { alg: "HS256" }, key = secret) =>
    new SignJWT(claims).setProtectedHeader(header as { alg: string }).setIssuedAt(now).setExpirationTime(now + 3600).sign(key);
  switch (spec.kind) {
    case "valid":
      return `Bearer ${await sign({ sub: spec.sub })}`;
    case "typ":
      return `Bearer ${await sign({ sub: "tenant-a" }, { alg: "HS256", typ: spec.typ })}`;
    case "expired":
      return `Bearer ${await new SignJWT({ sub: "tenant-a" }).setProtectedHeader({ alg: "HS256" }).setExpirationTime(now - 3600).sign(secret)}`;
    case "tampered": {
      const [h, , s] = (await sign({ sub: "tenant-a" })).split(".");
      return `Bearer ${h}.${base64url({ sub: "tenant-b", exp: now + 3600 })}.${s}`;
    }
    case "alg-none":
      return `Bearer ${base64url({ alg: "none", typ: "JWT" })}.${base64url({ sub: "tenant-a", exp: now + 3600 })}.`;
    case "other-secret":
      return `Bearer ${await sign({ sub: "tenant-a" }, { alg: "HS256" }, new TextEncoder().encode("another-secret-of-at-least-32-bytes!!"))}`;
    case "huge":
      return `Bearer ${await sign({ sub: "tenant-a", pad: "x".repeat(6000) })}`;
    case "no-sub":
      return `Bearer ${await sign({})}`;
    case "raw":
      return spec.header?.replace(/[\r\n\u0000]/g, "");
  }
}

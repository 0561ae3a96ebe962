// The request fingerprint and the advisory lock id are stored or shared across processes: a
// fingerprint that changed between versions would turn a client's retry after an upgrade into
// a payload conflict, and a lock id that changed would let an old and a new API process run
// one key at once during a rolling deploy. Both are pinned to the values every version wrote.
import { expect, test } from "bun:test";
import canonicalize from "canonicalize";
import { advisoryLockId, canonicalJson, fingerprint, type FingerprintFields } from "../lib/idempotency/keys.ts";
import { createCharge } from "../lib/charges/charges.ts";
import { createHash, createHmac } from "node:crypto";
import { hmacSha256Hex, sha256Hex, sha256Int64 } from "../lib/platform/sha256.ts";

test("SHA-256 of a string is the standard one (FIPS 180-2 test vector)", () => {
  expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
});

test("sha256Hex and sha256Int64 agree with node:crypto's createHash on any text", () => {
  const texts = ["", "abc", "ténant-ü", "🙂", "\u0000", "x".repeat(1000), "\ud800", "a\udc00b", "x\ud83d\ude42y\udfff"];
  for (let i = 0; i < 2000; i++) texts.push(crypto.randomUUID() + String.fromCharCode(Math.floor(Math.random() * 0xd800)));
  for (const text of texts) {
    const digest = createHash("sha256").update(text).digest();
    expect(sha256Hex(text)).toBe(digest.toString("hex"));
    expect(sha256Int64(text)).toBe(digest.readBigInt64BE(0));
  }
});

test("hmacSha256Hex (keyHash's, Bun's hasher on Bun) is RFC 4231's and agrees with node:crypto's createHmac, the path of the other runtimes", () => {
  // RFC 4231 test case 2.
  expect(hmacSha256Hex(new TextEncoder().encode("Jefe"), "what do ya want for nothing?")).toBe("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const key = crypto.getRandomValues(new Uint8Array(32));
  for (const text of ["", "order-12345", "ténant-ü", "🙂", "\ud800", "k".repeat(255), crypto.randomUUID()]) {
    expect(hmacSha256Hex(key, text)).toBe(createHmac("sha256", key).update(text).digest("hex"));
  }
});

test.each([
  [1, "d593df2256adf6556ae7edf165bf2b6de11e98028179843b1a6d8fa55f8b8301"],
  [4900, "910e671b1bb9d5a7b3256c8c55f1e750f32b8f1308eaf70745e21daa7169d31c"],
  [2_147_483_647, "16824c9ed87e0fc64d3cabdb5e4c93c42cd7b3470f89fe6a5d40dc2392cd0078"],
])("the fingerprint of amountCents %d is pinned", (amountCents, hex) => {
  // The charge's fields as the charges operation names them, and the bytes hashed: exactly
  // what the previous release stored for the same body, so its keys still replay.
  const fields = createCharge.fingerprint({ params: {}, body: { amountCents } });
  expect(canonicalJson(fields)).toBe(`{"amountCents":${amountCents}}`);
  expect(fingerprint(fields)).toBe(hex);
  expect(sha256Hex(`{"amountCents":${amountCents}}`)).toBe(hex);
});

test.each([
  ["tenant-a", "order-123-payment", "-7008240493003664186"],
  ["default", "8e03978e-40d5-43e8-bc93-6894a57f9324", "-7663005517317826497"],
  ["ténant-ü", "k", "506720370683625690"],
  ["", "x", "-6250192210748889885"],
])("the lock id of tenant %p and key %p is pinned", (tenant, key, id) => {
  expect(advisoryLockId(tenant, key, "POST /charges")).toBe(id);
});

test("the canonical JSON of a charge is the canonicalize package's (RFC 8785) for any finite amount", () => {
  const amounts = [1, 4900, 2_147_483_647, 0, -0, -1, 1.5, 0.1, 1e21, 1e-7, 123456789012345680000, Number.MAX_SAFE_INTEGER, Number.MIN_VALUE, Number.MAX_VALUE];
  for (let i = 0; i < 10_000; i++) amounts.push(Math.floor(Math.random() * 2_147_483_647) + 1, (Math.random() - 0.5) * 10 ** Math.floor(Math.random() * 40 - 20));
  for (const amountCents of amounts) {
    const fields = createCharge.fingerprint({ params: {}, body: { amountCents } });
    expect(canonicalJson(fields)).toBe(canonicalize(fields) as string);
    expect(canonicalJson(fields)).toBe(canonicalize({ amountCents }) as string);
  }
});

test("a non-finite number has no canonical JSON: a bug, thrown rather than hashed", () => {
  for (const value of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
    expect(() => canonicalJson({ amountCents: value })).toThrow(/bug/);
  }
});

test.each<[string, FingerprintFields, string]>([
  ["two members, written out of order", { chargeId: "8e03978e-40d5-43e8-bc93-6894a57f9324", amountCents: 1500 }, '{"amountCents":1500,"chargeId":"8e03978e-40d5-43e8-bc93-6894a57f9324"}'],
  ["three members, reversed", { z: 1, m: "x", a: 2 }, '{"a":2,"m":"x","z":1}'],
  ["names differing in case (uppercase sorts first)", { b: 1, B: 2, a: 3, A: 4 }, '{"A":4,"B":2,"a":3,"b":1}'],
  ["a name that is a prefix of another", { ab: 1, a: 2, abc: 3 }, '{"a":2,"ab":1,"abc":3}'],
])("several members (%s) are sorted by name, as RFC 8785 sorts them", (_name, fields, canonical) => {
  expect(canonicalJson(fields)).toBe(canonical);
  expect(canonicalJson(fields)).toBe(canonicalize(fields) as string);
  expect(fingerprint(fields)).toBe(sha256Hex(canonical));
});

test("several members' canonical JSON is the canonicalize package's (RFC 8785) in any order, with strings that need escaping", () => {
  // RFC 8785 §3.2.3 sorts by UTF-16 code units: digits, "_", non-ASCII and astral names
  // exercise where that differs from naive expectations (integer-like names, which JS
  // enumerates first and numerically, and an astral name sorting before U+FF61); values need
  // JSON string escapes.
  const names = ["amountCents", "chargeId", "refundId", "id", "Id", "_x", "a1", "a10", "a2", "2", "10", "é", "ü", "\u00c9", "🙂", "\uff61", "z"];
  const values = ["", 'quote " and \\ backslash', "\n\t\u0000\u001f", "ténant-ü", "🙂", "\u2028", 0, -0, 1.5, 1e21, 1e-7, 4900];
  for (let i = 0; i < 2000; i++) {
    const fields: Record<string, string | number> = {};
    const count = 2 + Math.floor(Math.random() * 5);
    for (let j = 0; j < count; j++) fields[names[Math.floor(Math.random() * names.length)]!] = values[Math.floor(Math.random() * values.length)]!;
    // Insertion order is random too: the fingerprint must not depend on it.
    const shuffled = Object.fromEntries(Object.entries(fields).sort(() => Math.random() - 0.5));
    expect(canonicalJson(shuffled)).toBe(canonicalize(fields) as string);
    expect(fingerprint(shuffled)).toBe(fingerprint(fields));
  }
});

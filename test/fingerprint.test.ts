// The request fingerprint and the advisory lock id are stored or shared across processes: a
// fingerprint that changed between versions would turn a client's retry after an upgrade into
// a payload conflict, and a lock id that changed would let an old and a new API process run
// one key at once during a rolling deploy. Both are pinned to the values every version wrote.
import { expect, test } from "bun:test";
import canonicalize from "canonicalize";
import { advisoryLockId, canonicalCharge, fingerprint } from "../lib/api/fingerprint.ts";
import { createHash } from "node:crypto";
import { sha256Hex, sha256Int64 } from "../lib/shared/sha256.ts";

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

test.each([
  [1, "d593df2256adf6556ae7edf165bf2b6de11e98028179843b1a6d8fa55f8b8301"],
  [4900, "910e671b1bb9d5a7b3256c8c55f1e750f32b8f1308eaf70745e21daa7169d31c"],
  [2_147_483_647, "16824c9ed87e0fc64d3cabdb5e4c93c42cd7b3470f89fe6a5d40dc2392cd0078"],
])("the fingerprint of amountCents %d is pinned", (amountCents, hex) => {
  expect(fingerprint({ amountCents })).toBe(hex);
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
  for (const amountCents of amounts) expect(canonicalCharge(amountCents)).toBe(canonicalize({ amountCents }) as string);
});

// SHA-256 and HMAC-SHA256 of a string in one call, the cheapest way each runtime offers (the API
// hashes three short strings per charge): Bun.SHA256, node:crypto's one-shot hash(), createHash().
import * as nodeCrypto from "node:crypto";

type OneShot = (algorithm: string, data: string, encoding: "hex" | "buffer") => string | Buffer;
// Looked up on the namespace, not imported by name: a runtime without it must still load this module.
const oneShot = (nodeCrypto as unknown as { hash?: OneShot }).hash;

interface BunHasher {
  update(input: string): BunHasher;
  digest(encoding: "hex"): string;
}
type BunHasherConstructor = new (algorithm: "sha256", hmacKey: Uint8Array) => BunHasher;
const BunCryptoHasher = (globalThis as { Bun?: { CryptoHasher?: BunHasherConstructor } }).Bun?.CryptoHasher;

interface BunSha256 {
  hash(input: string, encoding: "hex"): string;
  hash(input: string, into: Uint8Array): Uint8Array;
}
const bunSha256 = (globalThis as { Bun?: { SHA256?: BunSha256 } }).Bun?.SHA256;
// The digest Bun writes into `scratch` is read before anything else runs.
const DIGEST_BYTES = 32;
let scratch: Buffer | undefined;

export function sha256Hex(text: string): string {
  if (bunSha256) return bunSha256.hash(text, "hex");
  return oneShot ? (oneShot("sha256", text, "hex") as string) : nodeCrypto.createHash("sha256").update(text).digest("hex");
}

/** HMAC-SHA256 of `text` under `key`, as hex. */
export function hmacSha256Hex(key: Uint8Array, text: string): string {
  if (BunCryptoHasher) return new BunCryptoHasher("sha256", key).update(text).digest("hex");
  return nodeCrypto.createHmac("sha256", key).update(text).digest("hex");
}

/** The first 8 bytes of the SHA-256 of `text`, as a signed big-endian 64-bit integer. */
export function sha256Int64(text: string): bigint {
  if (bunSha256) {
    scratch ??= Buffer.alloc(DIGEST_BYTES);
    bunSha256.hash(text, scratch);
    return scratch.readBigInt64BE(0);
  }
  const digest = oneShot ? (oneShot("sha256", text, "buffer") as Buffer) : nodeCrypto.createHash("sha256").update(text).digest();
  return digest.readBigInt64BE(0);
}

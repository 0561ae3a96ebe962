// Identifiers shaped like Stripe's: a prefix and 24 random base-62 characters.
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ID_CHARS = 24;
const REQUEST_ID_CHARS = 14;

function randomChars(count: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(count));
  let out = "";
  // 256 % 62 leaves a slight bias; these are identifiers, not secrets.
  for (const byte of bytes) out += ALPHABET[byte % ALPHABET.length];
  return out;
}

export function newId(prefix: "pi" | "ch" | "re" | "pm" | "txn"): string {
  return `${prefix}_${randomChars(ID_CHARS)}`;
}

export function newRequestId(): string {
  return `req_${randomChars(REQUEST_ID_CHARS)}`;
}

export function clientSecret(intentId: string): string {
  return `${intentId}_secret_${randomChars(ID_CHARS + 1)}`;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

// The key store: what lets a process that restarts carry on one intent (one logical charge or
// refund) with the key it used before, so the retry after a crash is a replay, not a second
// charge. The core needs only this interface; MemoryKeyStore runs everywhere, and
// client/file-store.ts keeps the records in a JSON file where a file system exists.

/** What is kept per intent: the key, and a hash of what it was sent with. */
export interface IntentRecord {
  readonly idempotencyKey: string;
  /** SHA-256 (hex) of the method, path and body bytes: another body for the intent is refused locally. */
  readonly requestHash: string;
  /** Epoch ms when the intent was first recorded. */
  readonly createdAt: number;
}

/**
 * A map from a caller-chosen intent id (an order id, a checkout id) to its record. `get` and
 * `set` may be asynchronous. `set` is called once per intent, before its first try, and its
 * promise settles only once the record is durable: a crash after that keeps the key.
 * Records are never removed by the client: the caller removes an intent (`delete`) once its
 * outcome is recorded on its side or the API's key retention (24 h by default) has passed.
 */
export interface KeyStore {
  get(intentId: string): Promise<IntentRecord | undefined> | IntentRecord | undefined;
  set(intentId: string, record: IntentRecord): Promise<void> | void;
  delete(intentId: string): Promise<void> | void;
}

/** A KeyStore in this process's memory: survives retries, not a restart. Works on every runtime. */
export class MemoryKeyStore implements KeyStore {
  readonly #records = new Map<string, IntentRecord>();

  get(intentId: string): IntentRecord | undefined {
    return this.#records.get(intentId);
  }

  set(intentId: string, record: IntentRecord): void {
    this.#records.set(intentId, record);
  }

  delete(intentId: string): void {
    this.#records.delete(intentId);
  }
}

/** SHA-256 of the request's identity (method, path, body bytes), hex; Web Crypto, on every runtime. */
export async function requestHash(method: string, path: string, body: Uint8Array): Promise<string> {
  const head = new TextEncoder().encode(`${method} ${path}\n`);
  const all = new Uint8Array(head.length + body.length);
  all.set(head, 0);
  all.set(body, head.length);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

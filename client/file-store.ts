// A KeyStore in a JSON file, for processes that restart (a checkout script, a batch job):
// `import { FileKeyStore } from "charges-outbox/client/file-store"`. It uses node:fs/promises,
// which Bun, Deno and Node have; workerd and browsers use MemoryKeyStore or a store of their
// own (Durable Object storage, IndexedDB) behind the same interface.
import { readFile, rename, writeFile } from "node:fs/promises";
import type { IntentRecord, KeyStore } from "./key-store.ts";

// A Map, not an object: an intent id such as "__proto__" is a key like any other.
type Records = Map<string, IntentRecord>;

/**
 * Every change rewrites the file through a temporary file and a rename, so a crash leaves the
 * old file or the new one, never half of one. Changes are serialized within the process; one
 * file belongs to one process at a time.
 */
export class FileKeyStore implements KeyStore {
  #records: Promise<Records> | undefined;
  #writes: Promise<void> = Promise.resolve();

  readonly path: string;

  constructor(path: string) {
    this.path = path;
  }

  async get(intentId: string): Promise<IntentRecord | undefined> {
    return (await this.#load()).get(intentId);
  }

  set(intentId: string, record: IntentRecord): Promise<void> {
    return this.#change((records) => {
      records.set(intentId, record);
    });
  }

  delete(intentId: string): Promise<void> {
    return this.#change((records) => {
      records.delete(intentId);
    });
  }

  #load(): Promise<Records> {
    this.#records ??= readFile(this.path, "utf8").then(
      (text) => new Map(Object.entries(JSON.parse(text) as Record<string, IntentRecord>)),
      (error: unknown) => {
        if ((error as { code?: unknown }).code === "ENOENT") return new Map();
        throw error;
      },
    );
    return this.#records;
  }

  #change(apply: (records: Records) => void): Promise<void> {
    const write = this.#writes.then(async () => {
      const records = await this.#load();
      apply(records);
      const temporary = `${this.path}.${crypto.randomUUID()}.tmp`;
      await writeFile(temporary, JSON.stringify(Object.fromEntries(records), null, 1));
      await rename(temporary, this.path);
    });
    this.#writes = write.catch(() => {});
    return write;
  }
}

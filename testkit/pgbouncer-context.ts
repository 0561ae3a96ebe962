// What a test file of the PgBouncer deployment sets up the same way: whether pgbouncer is
// installed (a line naming the file when it is not), `behind` (a test skipped without it),
// its own database emptied of requests' rows before each test, and cleanups run at the end.
import { afterAll, beforeEach, test } from "bun:test";
import { pgbouncerBinary } from "./pgbouncer.ts";
import { freshDatabase, type TestDatabase } from "./services.ts";

export interface PgbouncerTestFile {
  readonly installed: boolean;
  readonly behind: typeof test;
  readonly db: TestDatabase;
  /** Run after the file's last test, last added first. */
  readonly cleanups: Array<() => Promise<unknown>>;
}

export async function pgbouncerTestFile(file: string, label: string): Promise<PgbouncerTestFile> {
  const installed = pgbouncerBinary() !== undefined;
  if (!installed) console.warn(`${file} skipped: \`pgbouncer\` is not installed (apt-get install -y pgbouncer; .ci/run installs it)`);
  const db = await freshDatabase(label);
  const cleanups: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
    await db.drop();
  });
  beforeEach(async () => {
    await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
  });
  return { installed, behind: test.skipIf(!installed), db, cleanups };
}

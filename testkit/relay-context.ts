// What a relay test file sets up the same way: its own database (the outbox, inbox, refunds
// and charges emptied before each test), the broker, a topic prefix of its own per test, and
// cleanups run after each test in reverse order.
import { afterAll, afterEach, beforeEach } from "bun:test";
import { freshDatabase, services, type TestDatabase } from "./services.ts";

export interface RelayTestContext {
  readonly db: TestDatabase;
  readonly mqttUrl: string;
  /** Run after the current test, last added first. */
  readonly cleanups: Array<() => Promise<unknown>>;
  /** The current test's topic prefix. */
  readonly prefix: string;
}

export async function relayTestContext(label: string): Promise<RelayTestContext> {
  const db = await freshDatabase(label);
  const { mqttUrl } = await services();
  const cleanups: Array<() => Promise<unknown>> = [];
  let prefix = "";
  beforeEach(async () => {
    await db.sql`truncate outbox, inbox, refunds, charges`;
    prefix = `test/${crypto.randomUUID()}/`;
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(() => db.drop());
  return {
    db,
    mqttUrl,
    cleanups,
    get prefix() {
      return prefix;
    },
  };
}

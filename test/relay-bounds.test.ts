// The relay's own time bounds: a claim stuck behind a table lock fails with lock_timeout
// (RELAY_LOCK_TIMEOUT_MS), the relay backs off instead of hanging, and once the lock is gone
// the rows written meanwhile are delivered in order.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import type { Sql } from "../lib/platform/db.ts";
import { insertPending, type PendingRow } from "../testkit/outbox.ts";
import { collect } from "../testkit/mqtt.ts";
import { startEntrypoint } from "../testkit/processes.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_bounds");
const { mqttUrl } = await services();
afterAll(() => db.drop());

// Short, so the test sees it trip; the fallback poll makes the relay claim without a NOTIFY.
const LOCK_TIMEOUT_MS = 300;
const POLL_MS = 100;
const LOCK_NOT_AVAILABLE = "55P03";

test("a claim behind an ACCESS EXCLUSIVE lock on outbox trips RELAY_LOCK_TIMEOUT_MS and backs off; after the lock, the rows arrive in order", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const collector = await collect(mqttUrl, prefix);
  const lines: string[] = [];
  let rows: PendingRow[] = [];
  // The lock is taken before the relay starts: its start-up does not touch outbox (the schema is current).
  const locked = db.sql.begin(async (tx) => {
    await tx`lock table outbox in access exclusive mode`;
    const relay = await startEntrypoint("relay", {
      env: { DATABASE_URL: db.url, MQTT_URL: mqttUrl, MQTT_TOPIC_PREFIX: prefix, RELAY_LOCK_TIMEOUT_MS: String(LOCK_TIMEOUT_MS), OUTBOX_POLL_MS: String(POLL_MS), LOG_LEVEL: "warn" },
      stdout: (line) => lines.push(line),
    });
    const backoff = await waitUntil(
      () => lines.find((l) => l.includes("batch failed; backing off") && l.includes(LOCK_NOT_AVAILABLE)),
      10_000,
      "a claim to trip the lock timeout",
    );
    expect(JSON.parse(backoff).retryInMs).toBeNumber();
    rows = await insertPending(tx as unknown as Sql, 3); // written under the lock, visible at commit
    return relay;
  });
  const relay = await locked;
  try {
    await collector.waitFor(rows.length);
    expect(collector.ids()).toEqual(rows.map((r) => r.id));
  } finally {
    await collector.close();
    await relay.child.stop();
  }
});

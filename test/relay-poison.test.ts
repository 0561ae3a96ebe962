// Poison rows: a publish the broker refuses by closing the connection (Mosquitto over its
// max_packet_size) must not hold back the rows behind it. With MQTT 5 the DISCONNECT's reason
// code (0x95 packet too large) parks the row at once; with MQTT 3.1.1 the broker just closes
// the connection, and the row is counted as failed after MAX_RELEASES such closes.
import { afterAll, afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { MAX_RELEASES } from "../lib/relay/outcome.ts";
import { insertPending, type PendingRow } from "../testkit/outbox.ts";
import { collect } from "../testkit/mqtt.ts";
import { mosquittoInstalled, privateMosquitto, type PrivateBroker } from "../testkit/mosquitto.ts";
import { waitUntil } from "../testkit/wait.ts";
import { freshDatabase } from "../testkit/services.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("relay_poison");
const cleanups: Array<() => Promise<unknown>> = [];
let prefix = "";
let broker: PrivateBroker | undefined;

// Far below the 10 KB payload of the poison row, far above a ChargeCreated envelope (~300 bytes).
const MAX_PACKET_SIZE = 2048;
const BIG_PAYLOAD_BYTES = 10_000;

beforeEach(async () => {
  await db.sql`truncate outbox, inbox, refunds, charges`;
  prefix = `test/${crypto.randomUUID()}/`;
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});
afterAll(async () => {
  await broker?.stop();
  await db.drop();
});

async function smallPacketBroker(): Promise<PrivateBroker> {
  broker ??= await privateMosquitto(`max_packet_size ${MAX_PACKET_SIZE}`);
  return broker;
}

/** One row with a 10 KB payload, then five ordinary ones; oldest first. */
async function poisonThenFive(): Promise<{ poison: PendingRow; rest: PendingRow[] }> {
  const [poison, ...rest] = await insertPending(db.sql, 6);
  const padding = "x".repeat(BIG_PAYLOAD_BYTES);
  await db.sql`
    update outbox set payload = json_build_object('chargeId', aggregate_id, 'amountCents', 100, 'note', ${padding}::text)::text
    where id = ${poison!.id}`;
  return { poison: poison!, rest };
}

async function runRelay(url: string, protocolVersion: 4 | 5): Promise<void> {
  const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName: "relay-poison-test" });
  const connection = connectBroker(url, { protocolVersion });
  const relay = createRelay({ sql, broker: connection, batchSize: 50, pollMs: 200, topicPrefix: prefix });
  cleanups.push(() => sql.end({ timeout: 5 }), () => connection.close(), () => relay.stop());
  void relay.run();
}

async function rowState(id: string) {
  const [row] = await db.sql<{ published: boolean; parked: boolean; attempts: number; releases: number; last_error: string | null }[]>`
    select published_at is not null as published, parked_at is not null as parked, attempts, releases, last_error
    from outbox where id = ${id}`;
  if (!row) throw new Error(`no outbox row ${id}`);
  return row;
}

test.skipIf(!mosquittoInstalled())(
  "MQTT 5: the broker's DISCONNECT 0x95 parks the oversized row at once, and the five rows behind it are delivered in order",
  async () => {
    const { url } = await smallPacketBroker();
    const collector = await collect(url, prefix);
    cleanups.push(() => collector.close());
    const { poison, rest } = await poisonThenFive();
    await runRelay(url, 5);

    await collector.waitFor(rest.length);
    const state = await waitUntil(async () => {
      const s = await rowState(poison.id);
      return s.parked && s;
    }, 10_000, "the oversized row parked");
    expect(state).toMatchObject({ published: false, attempts: 1, releases: 0 });
    expect(state.last_error).toContain("0x95");
    await collector.barrier(); // anything else the broker accepted has arrived by now
    expect(collector.ids()).toEqual(rest.map((r) => r.id));
    await waitUntil(async () => (await Promise.all(rest.map((r) => rowState(r.id)))).every((s) => s.published), 5000, "the five marked");
  },
);

test.skipIf(!mosquittoInstalled())(
  `MQTT 3.1.1: a broker that closes the connection without a reason: after ${MAX_RELEASES} closes the row counts a failed attempt and the rows behind it flow`,
  async () => {
    const { url } = await smallPacketBroker();
    const collector = await collect(url, prefix);
    cleanups.push(() => collector.close());
    const { poison, rest } = await poisonThenFive();
    await runRelay(url, 4);

    await collector.waitFor(rest.length, 20_000);
    const state = await waitUntil(async () => {
      const s = await rowState(poison.id);
      return s.attempts >= 1 && s;
    }, 10_000, "the oversized row counted as failed");
    expect(state).toMatchObject({ published: false, releases: MAX_RELEASES - 1 });
    expect(state.last_error).toContain("closed the connection without a reason code");
    await collector.barrier();
    expect(collector.ids()).toEqual(rest.map((r) => r.id));
  },
);

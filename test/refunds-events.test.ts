// A charge and two refunds through the API, published by a real relay to a real broker under
// a private topic prefix: what a subscriber receives (topics, envelopes, sequences, MQTT 5
// properties) against the rows the API wrote.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { startTestApi } from "../testkit/api.ts";
import { TEST_TENANT } from "../testkit/auth.ts";
import { collect } from "../testkit/mqtt.ts";
import { countWhere } from "../testkit/outbox.ts";
import { newCharge, postRefund, refundBody, type RefundBody } from "../testkit/refunds.ts";
import { freshDatabase, services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const db = await freshDatabase("refunds_events");
const { mqttUrl, mqtt5 } = await services();
const api = await startTestApi(db.url);
const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  await api.close();
  await db.drop();
});

test("ChargeCreated then two ChargeRefunded: their topics, envelopes (sequence 1, 2, 3; refundedCents the running total) and aggregate-sequence", async () => {
  const prefix = `test/${crypto.randomUUID()}/`;
  const collector = await collect(mqttUrl, prefix);
  cleanups.push(() => collector.close());

  const chargeId = await newCharge(api, 1000);
  const refunds: RefundBody[] = [];
  for (const amountCents of [300, 450]) {
    const res = await postRefund(api, chargeId, refundBody(amountCents), { key: crypto.randomUUID() });
    expect(res.status).toBe(201);
    refunds.push((await res.json()) as RefundBody);
  }
  const rows = await db.sql<{ id: string; created_at: string }[]>`
    select id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_at
      from outbox where aggregate_id = ${chargeId} order by sequence`;
  expect(rows.length).toBe(3);

  const sql = createSql(db.url, { max: laneCount(50) + 1, applicationName: "relay-test" });
  cleanups.push(() => sql.end({ timeout: 5 }));
  const broker = connectBroker(mqttUrl);
  cleanups.push(() => broker.close());
  await waitUntil(() => broker.connected, 5000, "broker connection");
  const relay = createRelay({ sql, broker, batchSize: 50, pollMs: 5000, topicPrefix: prefix });
  cleanups.push(() => relay.stop());
  void relay.run();

  const received = await collector.waitFor(3);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 5000, "every row marked published");
  await relay.stop();
  await collector.barrier();
  expect(collector.messages.length).toBe(3);

  const expected = [
    { topic: `${prefix}charges/ChargeCreated`, type: "ChargeCreated", data: { chargeId, amountCents: 1000, currency: "usd" } },
    { topic: `${prefix}charges/ChargeRefunded`, type: "ChargeRefunded", data: { chargeId, refundId: refunds[0]!.id, amountCents: 300, refundedCents: 300 } },
    { topic: `${prefix}charges/ChargeRefunded`, type: "ChargeRefunded", data: { chargeId, refundId: refunds[1]!.id, amountCents: 450, refundedCents: 750 } },
  ];
  // One aggregate, one connection: first receipts are in sequence order.
  received.forEach((message, i) => {
    const want = expected[i]!;
    expect(message.topic).toBe(want.topic);
    expect(message.packet.qos).toBe(1);
    expect(message.packet.retain).toBe(false);
    expect(Object.keys(message.body)).toEqual(["id", "type", "aggregateId", "tenantId", "createdAt", "sequence", "data"]);
    expect(message.body).toEqual({
      id: rows[i]!.id,
      type: want.type,
      aggregateId: chargeId,
      tenantId: TEST_TENANT,
      createdAt: rows[i]!.created_at,
      sequence: i + 1,
      data: want.data,
    });
    if (!mqtt5) return;
    expect(message.packet.properties?.contentType).toBe("application/json");
    expect(message.packet.properties?.userProperties).toEqual({
      "event-id": rows[i]!.id,
      "event-type": want.type,
      "tenant-id": TEST_TENANT,
      "aggregate-sequence": String(i + 1),
    });
  });
  // The refund events' data in key order, as docs/relay.md lists it.
  expect(Object.keys(received[1]!.body.data as object)).toEqual(["chargeId", "refundId", "amountCents", "refundedCents"]);
});

// A 3-node aedes cluster (testkit/aedes-cluster.ts: three aedes processes over one private
// Redis): the relay publishes to one node, the reference subscriber reads from another, and
// every event gets there, each charge's in sequence order. Both are given the cluster as a
// list, their own node first, and speak 3.1.1 by the `auto` fallback (aedes refuses MQTT 5).
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { createSql } from "../lib/shared/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import { aedesCluster, aedesClusterMissing, type AedesCluster } from "../testkit/aedes-cluster.ts";
import { countWhere, insertChains } from "../testkit/outbox.ts";
import { relayTestContext } from "../testkit/relay-context.ts";
import { spawnSubscriber, type SubscriberLine } from "../testkit/subscriber.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(90_000);

const missing = aedesClusterMissing();
if (missing) console.warn(`test/aedes-cluster.test.ts skipped: ${missing}`);
const ctx = await relayTestContext("aedes_cluster");
const { db, cleanups } = ctx;
let cluster: AedesCluster | undefined;

beforeAll(async () => {
  if (!missing) cluster = await aedesCluster();
}, 60_000);
afterAll(() => cluster?.stop());

test.skipIf(missing !== undefined)("an event published on one node reaches a subscriber on another, each charge's in order", async () => {
  const [n1, n2, n3] = cluster!.mqttUrls;
  const { child, lines } = await spawnSubscriber({ databaseUrl: db.url, mqttUrl: [n3, n1, n2].join(","), prefix: ctx.prefix, consumer: `aedes-${crypto.randomUUID().slice(0, 8)}` });
  cleanups.push(() => child.stop());
  expect(lines.find((l) => l.event === "ready")).toMatchObject({ broker: n3 });

  const sql = createSql(db.url, { max: laneCount(100) + 1, applicationName: "aedes-cluster-test" });
  const broker = connectBroker(cluster!.mqttUrls, { connections: 3 });
  const relay = createRelay({ sql, broker, batchSize: 100, pollMs: 100, topicPrefix: ctx.prefix });
  cleanups.push(() => sql.end({ timeout: 5 }), () => broker.close(), () => relay.stop());
  void relay.run();

  const chains = await insertChains(db.sql, 50, 2);
  const processed = (): SubscriberLine[] => lines.filter((l) => l.event === "received" && !l.duplicate);
  await waitUntil(() => processed().length >= 150, 30_000, "150 events at the subscriber on n3").catch((error: unknown) => {
    throw new Error(`${String(error)}\n${cluster!.output()}`);
  });
  expect(broker.url).toBe(n1!);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "every row marked");
  const order = new Map<string, number[]>();
  for (const line of processed()) order.set(line.aggregateId!, [...(order.get(line.aggregateId!) ?? []), line.sequence!]);
  for (const chain of chains) expect(order.get(chain.aggregateId)).toEqual([1, 2, 3]);
  expect(lines.filter((l) => l.event === "held" || l.event === "broker-moved")).toEqual([]);
});

// The relay publishing to one node of a broker cluster and the reference subscriber reading
// from another, as test/aedes-cluster.test.ts and test/nats-cluster.test.ts both check it: the
// relay given the cluster as a list (n1 first), the subscriber n3 first; 50 charges of 3
// events each must all reach the subscriber, each charge's in sequence order, none held and
// nobody moved.
import { expect } from "bun:test";
import { createSql } from "../lib/platform/db.ts";
import { connectBroker } from "../lib/relay/publisher.ts";
import { createRelay, laneCount } from "../lib/relay/loop.ts";
import type { BrokerCluster } from "./broker-cluster.ts";
import { countWhere, insertChains } from "./outbox.ts";
import type { RelayTestContext } from "./relay-context.ts";
import { spawnSubscriber, type SubscriberLine } from "./subscriber.ts";
import { waitUntil } from "./wait.ts";

const CHARGES = 50;
// ChargeCreated and two more per charge.
const EVENTS_PER_CHARGE = 3;
// A loaded 2-core machine delivers 150 events in a few seconds; this bounds a broken cluster.
const DELIVERY_TIMEOUT_MS = 30_000;

/** Runs it on `cluster` under the test's context; the relay and the subscriber are the context's cleanups. */
export async function expectRelayAcrossNodes(cluster: BrokerCluster, ctx: RelayTestContext): Promise<void> {
  const { db, cleanups } = ctx;
  const [n1, n2, n3] = cluster.mqttUrls;
  const { child, lines } = await spawnSubscriber({ databaseUrl: db.url, mqttUrl: [n3, n1, n2].join(","), prefix: ctx.prefix, consumer: `${cluster.kind}-${crypto.randomUUID().slice(0, 8)}` });
  cleanups.push(() => child.stop());
  expect(lines.find((l) => l.event === "ready")).toMatchObject({ broker: n3 });

  const sql = createSql(db.url, { max: laneCount(100) + 1, applicationName: `${cluster.kind}-cluster-test` });
  const broker = connectBroker(cluster.mqttUrls, { connections: 3 });
  const relay = createRelay({ sql, broker, batchSize: 100, pollMs: 100, topicPrefix: ctx.prefix });
  cleanups.push(() => sql.end({ timeout: 5 }), () => broker.close(), () => relay.stop());
  void relay.run();

  const chains = await insertChains(db.sql, CHARGES, EVENTS_PER_CHARGE - 1);
  const processed = (): SubscriberLine[] => lines.filter((l) => l.event === "received" && !l.duplicate);
  const events = CHARGES * EVENTS_PER_CHARGE;
  await waitUntil(() => processed().length >= events, DELIVERY_TIMEOUT_MS, `${events} events at the subscriber on n3`).catch((error: unknown) => {
    throw new Error(`${String(error)}\n${cluster.output()}`);
  });
  expect(broker.url).toBe(n1!);
  await waitUntil(async () => (await countWhere(db.sql, "pending")) === 0, 10_000, "every row marked");
  const order = new Map<string, number[]>();
  for (const line of processed()) order.set(line.aggregateId!, [...(order.get(line.aggregateId!) ?? []), line.sequence!]);
  const inOrder = Array.from({ length: EVENTS_PER_CHARGE }, (_, i) => i + 1);
  for (const chain of chains) expect(order.get(chain.aggregateId)).toEqual(inOrder);
  expect(lines.filter((l) => l.event === "held" || l.event === "broker-moved")).toEqual([]);
}

// A 3-node NATS cluster (testkit/nats.ts: MQTT 3.1.1 and JetStream on each node): the relay
// publishes to one node, the reference subscriber reads from another, and every event gets
// there, each charge's in sequence order. Both are given the cluster as a list, their own
// node first, and speak 3.1.1 by the `auto` fallback (NATS refuses MQTT 5).
import { afterAll, beforeAll, setDefaultTimeout, test } from "bun:test";
import { expectRelayAcrossNodes } from "../testkit/across-nodes.ts";
import { natsCluster, natsMissing, type NatsCluster } from "../testkit/nats.ts";
import { relayTestContext } from "../testkit/relay-context.ts";

setDefaultTimeout(90_000);

const missing = natsMissing();
if (missing) console.warn(`test/nats-cluster.test.ts skipped: ${missing}`);
const ctx = await relayTestContext("nats_cluster");
let cluster: NatsCluster | undefined;

beforeAll(async () => {
  if (!missing) cluster = await natsCluster();
}, 60_000);
afterAll(() => cluster?.stop());

test.skipIf(missing !== undefined)("an event published on one node reaches a subscriber on another, each charge's in order", async () => {
  await expectRelayAcrossNodes(cluster!, ctx);
});

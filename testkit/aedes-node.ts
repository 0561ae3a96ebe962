// One node of testkit/aedes-cluster.ts's broker cluster, as a process of its own so a test can
// SIGKILL it: an aedes broker whose sessions, subscriptions and queued QoS 1 messages live in a
// shared Redis (aedes-persistence-redis) and whose live messages cross to the other nodes through
// it (mqemitter-redis). A node keeps nothing of its own: a client that loses it finds its session
// on another, with every QoS 1 message not yet acknowledged. aedes speaks MQTT 3.1.1 only.
//   bun testkit/aedes-node.ts <mqtt port> <redis port>
// Prints "ready" on stdout once it takes MQTT connections.
import { Aedes, type AedesOptions } from "aedes";
import redisPersistence from "aedes-persistence-redis";
import mqemitterRedis from "mqemitter-redis";
import { createServer } from "node:net";

/** The port argument at `index`, or a line naming it and exit 2. */
function portArgument(index: number, name: string): number {
  const port = Number(process.argv[index]);
  if (Number.isInteger(port) && port > 0 && port < 65536) return port;
  console.error(`aedes-node: ${name} must be a TCP port, got ${JSON.stringify(process.argv[index])}`);
  process.exit(2);
}

// Where the PUBLISH aedes handles itself goes once its message was published by
// durableBeforePuback: a $SYS topic, which no client may publish to and no wildcard
// subscription matches (MQTT 3.1.1 §4.7.2), so nobody gets it twice.
const PUBLISHED_ALREADY = "$SYS/aedes-node/published-already";

/**
 * aedes answers a QoS 1 PUBLISH with its PUBACK first and only then queues the message for the
 * persistent sessions and hands it to the other nodes (lib/handlers/publish.js), so a node
 * SIGKILLed in between loses a message its publisher was told it has (seen: the relay moved on
 * to the next event of a charge whose previous one no subscriber ever got). Its authorizePublish
 * hook runs before that PUBACK, and may change the packet (aedes's docs): it publishes the
 * message itself, queued in Redis and sent on to every node, and only then lets aedes answer,
 * handing it a copy bound for PUBLISHED_ALREADY. A node lost before the PUBACK leaves the
 * message unacknowledged: its publisher sends it again, at least once, as MQTT has it.
 */
function durableBeforePuback(broker: Aedes): NonNullable<AedesOptions["authorizePublish"]> {
  return (client, packet, callback) => {
    // aedes's own rule, which a hook of ours replaces: no client publishes under $SYS/.
    if (packet.topic.startsWith("$SYS/")) return callback(new Error("$SYS/ topic is reserved"));
    if (client === null || packet.qos !== 1) return callback(null);
    const message = { cmd: "publish" as const, topic: packet.topic, payload: packet.payload, qos: 1 as const, retain: packet.retain, dup: false };
    broker.publish(message, (error) => {
      if (error) return callback(error);
      packet.topic = PUBLISHED_ALREADY;
      packet.retain = false;
      callback(null);
    });
  };
}

async function main(): Promise<void> {
  const mqttPort = portArgument(2, "<mqtt port>");
  const redis = { host: "127.0.0.1", port: portArgument(3, "<redis port>") };
  // The broker id stays aedes's own random one: the queued messages' keys in Redis carry it, so a
  // node started again under a fixed name would overwrite those its previous life left queued.
  const broker = await Aedes.createBroker({ mq: mqemitterRedis(redis), persistence: redisPersistence(redis) });
  broker.authorizePublish = durableBeforePuback(broker);
  // A persistence error (Redis lost) is emitted as "error" with no listener: the process ends
  // with it, and the test sees the node gone, with the stack in its output.
  const server = createServer(broker.handle);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(mqttPort, "127.0.0.1", () => resolve());
  });
  console.log("ready");
  // SIGTERM: a graceful stop (SIGKILL is the fault the tests use).
  process.on("SIGTERM", () => broker.close(() => server.close(() => process.exit(0))));
}

if (import.meta.main) await main();

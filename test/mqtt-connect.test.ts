// connectMqtt (lib/platform/mqtt-connect.ts) builds each connection itself and puts the caller's
// tap around it: on the first connection, on every reconnect, and on the MQTT 3.1.1 fallback
// against a broker that refuses 5. The URL's credentials and clientId reach the CONNECT.
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import type { MqttClient } from "mqtt";
import type { Duplex } from "node:stream";
import { startLocalBroker } from "../dev/mqtt-broker.ts";
import { AckTap } from "../lib/relay/ack-tap.ts";
import { connectMqtt } from "../lib/platform/mqtt-connect.ts";
import { mqttProxy } from "../testkit/mqtt-proxy.ts";
import { services } from "../testkit/services.ts";
import { waitUntil } from "../testkit/wait.ts";

setDefaultTimeout(30_000);

const { mqttUrl } = await services();
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

/** What one tapped connection carried: reads handled and PUBACKs taken off. */
interface Tapped {
  reads: number;
  readonly acks: number[];
}

/** A client whose every connection goes through an AckTap recording into `taps`, one entry per connection. */
function tappedClient(url: string): { client: MqttClient; taps: Tapped[] } {
  const taps: Tapped[] = [];
  const client = connectMqtt(url, {
    reconnectPeriod: 50,
    tap: (stream) => {
      const tapped: Tapped = { reads: 0, acks: [] };
      taps.push(tapped);
      return new AckTap(stream as Duplex, { acked: (id) => tapped.acks.push(id), readDone: () => tapped.reads++ });
    },
  });
  cleanups.push(() => client.endAsync(true));
  return { client, taps };
}

const connected = (client: MqttClient): Promise<void> => new Promise((resolve) => client.once("connect", () => resolve()));

test("a reconnect goes through the tap: its CONNACK and PUBACKs are read by the new connection's tap", async () => {
  const proxy = await mqttProxy(mqttUrl);
  cleanups.push(() => proxy.close());
  const { client, taps } = tappedClient(proxy.url);
  await connected(client);
  // One tap per connection so far: one on an MQTT 5 broker, two on a 3.1.1-only one (the
  // embedded broker), where the refused MQTT 5 connection came first.
  const before = taps.length;
  expect(before).toBe(proxy.connections.length);

  const reconnected = connected(client);
  proxy.connections[before - 1]?.cut();
  await reconnected;
  expect(taps.length).toBe(before + 1);
  expect(taps[before]?.reads).toBeGreaterThan(0); // the CONNACK came through the new connection's tap

  // mqtt.js never sees this PUBACK: the tap took it, so the callback is not awaited.
  client.publish(`test/${crypto.randomUUID()}`, "{}", { qos: 1 });
  await waitUntil(() => taps[before]?.acks.length === 1, 5_000, "the PUBACK on the new connection's tap");
  expect(taps.slice(0, before).every((tapped) => tapped.acks.length === 0)).toBe(true);
});

test("against a 3.1.1-only broker: the refused MQTT 5 connection and the 3.1.1 one are both tapped", async () => {
  const broker = await startLocalBroker();
  cleanups.push(() => broker.close());
  const { client, taps } = tappedClient(broker.url);
  await connected(client);
  expect(client.options.protocolVersion).toBe(4);
  expect(taps.length).toBeGreaterThanOrEqual(2);
  expect(taps.every((tapped) => tapped.reads > 0)).toBe(true);
});

test("the URL's clientId query reaches the CONNECT", async () => {
  const proxy = await mqttProxy(mqttUrl);
  cleanups.push(() => proxy.close());
  const clientId = `connect-test-${crypto.randomUUID()}`;
  const client = connectMqtt(`${proxy.url}/?clientId=${clientId}`, { reconnectPeriod: 50 });
  cleanups.push(() => client.endAsync(true));
  await connected(client);
  expect(proxy.connections[0]?.clientId).toBe(clientId);
});

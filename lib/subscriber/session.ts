// The subscriber's MQTT side: a persistent session (a client id kept across brokers), so QoS 1
// events sent while it is offline wait at the broker; the subscription; a bounded close.
import type { IPublishPacket, MqttClient } from "mqtt";
import { connectMqtt } from "../platform/mqtt-connect.ts";
import { describeMqttError } from "../platform/mqtt-errors.ts";
import { brokerList } from "../platform/mqtt-brokers.ts";
import type { SubscriberOptions } from "./types.ts";

// A day covers a deploy or an outage; SUBSCRIBER_INBOX_RETENTION_SECONDS must stay above it.
const SESSION_EXPIRY_S = 86_400;
const RECONNECT_MS = 1000;
const CLOSE_TIMEOUT_MS = 2000;

// `ack` sends the PUBLISH's PUBACK.
export function openSession(options: SubscriberOptions, onMessage: (packet: IPublishPacket, ack: () => void) => void) {
  const brokers = brokerList(options.mqttUrl);
  if (options.onBrokerMove) brokers.onMove(options.onBrokerMove);
  const client: MqttClient = connectMqtt(brokers, {
    clientId: options.clientId ?? options.consumer,
    clean: false,
    properties: { sessionExpiryInterval: options.sessionExpirySeconds ?? SESSION_EXPIRY_S },
    reconnectPeriod: RECONNECT_MS,
    version: options.mqttProtocol ?? "auto",
    // Once per cause, not once per retry (mqtt-connect.ts).
    onError: (error) => options.onError?.(`broker connection failed: ${describeMqttError(error)}`),
  });
  // A PUBACK goes out only on its PUBLISH's connection: on the next its packet id may name another
  // message, which a broker resuming the session elsewhere (NATS 2.9) then never delivers; an
  // unacknowledged PUBLISH comes again in the resumed session (MQTT §4.4).
  let connection = 0;
  client.on("close", () => void (connection += 1));
  client.handleMessage = (packet, callback) => {
    const on = connection;
    onMessage(packet, () => {
      if (on === connection && client.connected) callback();
    });
  };
  return { client, brokers, ready: subscribed(client, options) };
}

function subscribed(client: MqttClient, options: SubscriberOptions): Promise<void> {
  return new Promise<void>((resolve) => {
    const subscribe = (): void => {
      // Harmless on a resumed session; covers one the broker expired meanwhile.
      client.subscribe(options.topic, { qos: 1 }, (error) => {
        if (error) {
          options.onError?.(`subscribe failed: ${describeMqttError(error)}`);
          return;
        }
        // From now on mqtt.js subscribes again by itself on a broker without the session.
        client.off("connect", subscribe);
        resolve();
      });
    };
    client.on("connect", subscribe);
  });
}

export async function closeSession(client: MqttClient): Promise<void> {
  const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
  await client.endAsync().catch(() => {});
  clearTimeout(timer);
}

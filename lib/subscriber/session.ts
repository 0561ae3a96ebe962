// The subscriber's MQTT side: a persistent session (Clean Start 0 + Session Expiry on 5, Clean
// Session 0 on 3.1.1, stable client id), so QoS 1 events sent while it is offline wait at the
// broker; the subscription; a bounded close. Across several brokers it keeps its client id, so a
// cluster that shares sessions hands it the same one (lib/platform/mqtt-brokers.ts).
import type { IPublishPacket, MqttClient } from "mqtt";
import { connectMqtt, type MqttProtocol } from "../platform/mqtt-connect.ts";
import { describeMqttError } from "../platform/mqtt-errors.ts";
import { brokerList, type BrokerList, type BrokerMove, type Brokers } from "../platform/mqtt-brokers.ts";

// The broker keeps the session (subscription and queued QoS 1 events) this long while the
// subscriber is away: a day covers a deploy or an outage (Mosquitto also caps the queue:
// max_queued_messages). SUBSCRIBER_INBOX_RETENTION_SECONDS must stay above it.
const SESSION_EXPIRY_S = 86_400;
const RECONNECT_MS = 1000;
const CLOSE_TIMEOUT_MS = 2000;

export interface SessionOptions {
  readonly mqttUrl: Brokers;
  readonly mqttProtocol?: MqttProtocol;
  readonly topic: string;
  readonly consumer: string;
  readonly clientId?: string;
  readonly sessionExpirySeconds?: number;
  readonly onError?: (description: string) => void;
  readonly onBrokerMove?: (move: BrokerMove) => void;
}

export interface Session {
  readonly client: MqttClient;
  /** MQTT_URL's brokers and the one in use. */
  readonly brokers: BrokerList;
  readonly ready: Promise<void>;
}

/** Connects and subscribes; each received PUBLISH goes to `onMessage`, whose `ack` sends its PUBACK. */
export function openSession(options: SessionOptions, onMessage: (packet: IPublishPacket, ack: () => void) => void): Session {
  const brokers = brokerList(options.mqttUrl);
  const { onBrokerMove } = options;
  if (onBrokerMove) brokers.onMove(onBrokerMove);
  const client: MqttClient = connectMqtt(brokers, {
    clientId: options.clientId ?? options.consumer,
    clean: false,
    properties: { sessionExpiryInterval: options.sessionExpirySeconds ?? SESSION_EXPIRY_S },
    reconnectPeriod: RECONNECT_MS,
    version: options.mqttProtocol ?? "auto",
    // Once per cause, not once per retry (mqtt-connect.ts).
    onError: (error) => options.onError?.(`broker connection failed: ${describeMqttError(error)}`),
  });
  // mqtt.js handles one received packet at a time, so events are processed in arrival order.
  // A PUBACK goes out only on the connection its PUBLISH came in on: sent on the next
  // connection, its packet identifier may name another message by then, and a broker resuming
  // the session on another node (NATS 2.9 does) takes it for that one and never delivers it.
  // Unacknowledged, the PUBLISH comes again in the resumed session (MQTT 3.1.1 §4.4, 5 §4.4).
  let connection = 0;
  client.on("close", () => void (connection += 1));
  client.handleMessage = (packet, callback) => {
    const on = connection;
    onMessage(packet, () => {
      if (on === connection && client.connected) callback();
    });
  };
  // On a broker without our session (a move to a broker that does not share sessions, or an
  // expired one), mqtt.js subscribes again by itself: the CONNACK says no session is present.
  return { client, brokers, ready: subscribed(client, options) };
}

function subscribed(client: MqttClient, options: SessionOptions): Promise<void> {
  return new Promise<void>((resolve) => {
    const subscribe = (): void => {
      // A resumed session still holds the subscription; subscribing again is harmless and
      // covers a session the broker has expired meanwhile.
      client.subscribe(options.topic, { qos: 1 }, (error) => {
        if (error) {
          options.onError?.(`subscribe failed: ${describeMqttError(error)}`);
          return;
        }
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

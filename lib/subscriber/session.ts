// The subscriber's MQTT side: a persistent session (MQTT 5 Clean Start 0 + Session Expiry,
// stable client id; Clean Session 0 on 3.1.1), so QoS 1 events published while it is offline
// are kept by the broker and arrive when it returns; the subscription; a bounded close.
// Given several brokers (a cluster's nodes), it connects to one and moves to the next when that
// one is lost (lib/platform/mqtt-brokers.ts), under the same client id: a cluster that keeps
// sessions cluster-wide hands it the same session there, with what was queued for it.
import type { IPublishPacket, MqttClient } from "mqtt";
import { connectMqtt, type MqttProtocol } from "../platform/mqtt-connect.ts";
import { describeMqttError } from "../platform/mqtt-errors.ts";
import { brokerList, type BrokerList, type BrokerMove, type Brokers } from "../platform/mqtt-brokers.ts";

// The broker keeps the session (subscription + queued QoS 1 events) this long while the
// subscriber is away: a day covers a deploy or an outage. Mosquitto also caps the queue
// (max_queued_messages, 1000 by default).
// SUBSCRIBER_INBOX_RETENTION_SECONDS must stay above it (a redelivery must still find the inbox row).
const SESSION_EXPIRY_S = 86_400;
const RECONNECT_MS = 1000;
// A graceful DISCONNECT that has not completed in this time is cut.
const CLOSE_TIMEOUT_MS = 2000;

export interface SessionOptions {
  readonly mqttUrl: Brokers;
  readonly mqttProtocol?: MqttProtocol;
  readonly topic: string;
  readonly consumer: string;
  readonly clientId?: string;
  readonly sessionExpirySeconds?: number;
  readonly onError?: (description: string) => void;
  /** A move to the next broker after the one in use was lost, once per loss. */
  readonly onBrokerMove?: (move: BrokerMove) => void;
}

export interface Session {
  readonly client: MqttClient;
  /** MQTT_URL's brokers and the one in use. */
  readonly brokers: BrokerList;
  /** Resolves once subscribed. */
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
  // mqtt.js calls handleMessage for each received PUBLISH and sends the PUBACK when `ack` is
  // called; it handles one received packet at a time, so events are processed in arrival order.
  // A PUBACK goes out only on the connection its PUBLISH came in on. One for a PUBLISH of a
  // connection since closed would be sent (or queued by mqtt.js and sent) on the next, where the
  // packet identifier may by then name another message: a broker that resumes the session on
  // another node (NATS 2.9 does) took such a PUBACK for the message it had just given that
  // identifier, and never delivered the one it was meant for. Unacknowledged, the PUBLISH comes
  // again in the resumed session (MQTT 3.1.1 §4.4, 5 §4.4), and the inbox knows it.
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

/** Subscribes on every connect until a SUBACK comes back; resolves then. */
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

/** Disconnects, keeping the session; a DISCONNECT that hangs is cut after CLOSE_TIMEOUT_MS. */
export async function closeSession(client: MqttClient): Promise<void> {
  const timer = setTimeout(() => client.end(true), CLOSE_TIMEOUT_MS);
  await client.endAsync().catch(() => {});
  clearTimeout(timer);
}

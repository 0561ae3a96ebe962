// One way to open an mqtt.js client for the relay and the subscriber: MQTT 5 first, and
// MQTT 3.1.1 when the broker refuses 5 (the in-process aedes broker of `bun run dev` speaks
// 3.1.1 only). On 3.1.1 the publish properties (content type, user properties) are not sent;
// the envelope carries the same information.
import mqtt, { type IClientOptions, type IStream, type MqttClient } from "mqtt";
import { reasonCodeOf } from "./mqtt-errors.ts";

// CONNACK refusals meaning "I do not speak this protocol version": 3.1.1 return code 1
// (unacceptable protocol version), MQTT 5 reason code 0x84 (unsupported protocol version).
const UNSUPPORTED_PROTOCOL = new Set([0x01, 0x84]);

export interface MqttConnectOptions extends IClientOptions {
  readonly onError?: (error: Error) => void;
  /** Wraps each connection mqtt.js opens (every reconnect opens a new one) before it reads from it. */
  readonly tap?: (stream: IStream) => IStream;
}

/** mqtt.js builds each connection's stream with this (a private member of MqttClient). */
interface WithStreamBuilder {
  streamBuilder: (client: MqttClient) => IStream;
}

export function connectMqtt(url: string, options: MqttConnectOptions): MqttClient {
  const { onError, tap, ...clientOptions } = options;
  const client = mqtt.connect(url, {
    protocolVersion: 5,
    // A refused CONNECT (server unavailable, busy, or the protocol fallback below) is retried.
    reconnectOnConnackError: true,
    // mqtt.js formats a debug line per packet even when debugging is off: measurable per message.
    log: () => {},
    ...clientOptions,
    // With a tap the first connection waits until the tap is in place.
    manualConnect: tap !== undefined || clientOptions.manualConnect,
  });
  // Without an 'error' listener an error event would throw; the reconnect loop recovers.
  client.on("error", (error) => {
    const code = reasonCodeOf(error);
    if (client.options.protocolVersion === 5 && code !== undefined && UNSUPPORTED_PROTOCOL.has(code)) {
      client.options.protocolVersion = 4; // the next reconnect speaks 3.1.1
      return;
    }
    onError?.(error);
  });
  if (tap) {
    const builder = client as unknown as WithStreamBuilder;
    const build = builder.streamBuilder;
    builder.streamBuilder = (c) => tap(build(c));
    if (!clientOptions.manualConnect) client.connect();
  }
  return client;
}

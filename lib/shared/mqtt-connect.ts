// One way to open an mqtt.js client for the relay and the subscriber: MQTT 5 first, and
// MQTT 3.1.1 when the broker refuses 5 (the in-process aedes broker of `bun run dev` speaks
// 3.1.1 only). On 3.1.1 the publish properties (content type, user properties) are not sent;
// the envelope carries the same information.
import mqtt, { type IClientOptions, type MqttClient } from "mqtt";
import { reasonCodeOf } from "./mqtt-errors.ts";

// CONNACK refusals meaning "I do not speak this protocol version": 3.1.1 return code 1
// (unacceptable protocol version), MQTT 5 reason code 0x84 (unsupported protocol version).
const UNSUPPORTED_PROTOCOL = new Set([0x01, 0x84]);

export interface MqttConnectOptions extends IClientOptions {
  readonly onError?: (error: Error) => void;
}

export function connectMqtt(url: string, options: MqttConnectOptions): MqttClient {
  const { onError, ...clientOptions } = options;
  const client = mqtt.connect(url, {
    protocolVersion: 5,
    // A refused CONNECT (server unavailable, busy, or the protocol fallback below) is retried.
    reconnectOnConnackError: true,
    // mqtt.js formats a debug line per packet even when debugging is off: measurable per message.
    log: () => {},
    ...clientOptions,
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
  return client;
}

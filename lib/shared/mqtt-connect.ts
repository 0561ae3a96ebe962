// One way to open an mqtt.js client for the relay and the subscriber: MQTT 5 first, and
// MQTT 3.1.1 when the broker refuses 5 (the in-process aedes broker of `bun run dev` speaks
// 3.1.1 only). On 3.1.1 the publish properties (content type, user properties) are not sent;
// the envelope carries the same information.
//
// The client is mqtt.js's public `new MqttClient(streamBuilder, options)`: the stream builder
// here opens each connection (TCP, TLS or WebSocket, from the URL) and puts the caller's tap
// around it before mqtt.js reads from it, on the first connection and on every reconnect.
import { connect as tcpConnect, isIP } from "node:net";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import { MqttClient, type IClientOptions, type IStream } from "mqtt";
import WebSocket, { createWebSocketStream } from "ws";
import { reasonCodeOf } from "./mqtt-errors.ts";

// CONNACK refusals meaning "I do not speak this protocol version": 3.1.1 return code 1
// (unacceptable protocol version), MQTT 5 reason code 0x84 (unsupported protocol version).
const UNSUPPORTED_PROTOCOL = new Set([0x01, 0x84]);

// The URL schemes MQTT_URL accepts (lib/shared/config.ts), by transport.
const TCP = new Set(["mqtt:", "tcp:"]);
const TLS = new Set(["mqtts:", "tls:", "ssl:"]);
const WS = new Set(["ws:", "wss:"]);
const DEFAULT_PORT: Readonly<Record<string, number>> = { "mqtt:": 1883, "tcp:": 1883, "mqtts:": 8883, "tls:": 8883, "ssl:": 8883, "ws:": 80, "wss:": 443 };

export interface MqttConnectOptions extends IClientOptions {
  readonly onError?: (error: Error) => void;
  /** Wraps each connection the client opens (every reconnect opens a new one) before it reads from it. */
  readonly tap?: (stream: IStream) => IStream;
}

/** Where a URL points, parsed as mqtt.connect parses it. */
interface Target {
  readonly url: URL;
  readonly host: string;
  readonly port: number;
}

export function connectMqtt(url: string, options: MqttConnectOptions): MqttClient {
  const { onError, tap, ...clientOptions } = options;
  const target = targetOf(url);
  const clientConfig: IClientOptions = {
    protocolVersion: 5,
    // A refused CONNECT (server unavailable, busy, or the protocol fallback below) is retried.
    reconnectOnConnackError: true,
    // mqtt.js formats a debug line per packet even when debugging is off: measurable per message.
    log: () => {},
    ...credentialsOf(target.url),
    ...clientOptions,
  };
  // As mqtt.connect does: a clientId in the URL's query wins over the options'.
  const queryClientId = target.url.searchParams.get("clientId");
  if (queryClientId !== null) clientConfig.clientId = queryClientId;
  const open = (): IStream => openStream(target, clientConfig);
  const client = new MqttClient(tap ? () => tap(open()) : open, clientConfig);
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

function targetOf(raw: string): Target {
  const url = new URL(raw);
  const port = url.port === "" ? DEFAULT_PORT[url.protocol] : Number(url.port);
  if (port === undefined) throw new Error(`MQTT URL: unsupported protocol "${url.protocol}" (mqtt:, mqtts:, tcp:, tls:, ssl:, ws:, wss:)`);
  // WHATWG keeps an IPv6 host in brackets; sockets want it bare.
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || "localhost";
  return { url, host, port };
}

/** The URL's user info, percent-decoded as mqtt.connect has it. */
function credentialsOf(url: URL): Pick<IClientOptions, "username" | "password"> {
  if (url.username === "") return {};
  const username = decodeURIComponent(url.username);
  return url.password === "" ? { username } : { username, password: decodeURIComponent(url.password) };
}

function openStream(target: Target, options: IClientOptions): IStream {
  const { url, host, port } = target;
  if (TCP.has(url.protocol)) return tcpConnect({ host, port });
  if (TLS.has(url.protocol)) {
    const { ca, cert, key, servername } = options;
    const tlsOptions: ConnectionOptions = {
      host,
      port,
      // SNI takes a name, not an address.
      servername: servername ?? (isIP(host) === 0 ? host : undefined),
      rejectUnauthorized: options.rejectUnauthorized !== false,
      ca,
      cert,
      key,
    };
    return tlsConnect(tlsOptions);
  }
  if (WS.has(url.protocol)) {
    // The WebSocket subprotocol for MQTT 3.1.1 and 5 (MQTT 5 §6).
    const socket = new WebSocket(`${url.protocol}//${url.host}${url.pathname}${url.search}`, ["mqtt"]);
    const stream = createWebSocketStream(socket);
    socket.on("close", () => stream.destroy());
    return stream;
  }
  throw new Error(`MQTT URL: unsupported protocol "${url.protocol}"`);
}

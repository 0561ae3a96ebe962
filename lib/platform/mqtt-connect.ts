// One way to open an mqtt.js client for the relay and the subscriber. MQTT_PROTOCOL_VERSION
// `auto` (the default) tries MQTT 5 first and falls back to 3.1.1 when the broker refuses 5
// with a CONNACK (the in-process aedes broker of `bun run dev`) or closes the connection
// without any CONNACK (some 3.1.1-only brokers do); the version that got a CONNACK is kept for
// every reconnect until the process restarts. `5` and `3.1.1` speak that version only. On
// 3.1.1 the publish properties (content type, user properties) are not sent; the envelope
// carries the same information. A failed connection attempt is reported once per cause, not
// once per retry.
//
// The client is mqtt.js's public `new MqttClient(streamBuilder, options)`: the stream builder
// here opens each connection (TCP, TLS or WebSocket, from the URL) and puts the caller's tap
// around it before mqtt.js reads from it, on the first connection and on every reconnect.
// Given several brokers (MQTT_URL as a list), each connection goes to the one in use, and a
// connection that ends moves the process to the next (mqtt-brokers.ts); the client, its session
// state and its packet ids stay the same across the move, as across any reconnect.
import { connect as tcpConnect, isIP } from "node:net";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import { MqttClient, type IClientOptions, type IStream } from "mqtt";
import WebSocket, { createWebSocketStream } from "ws";
import { reasonCodeOf } from "./mqtt-errors.ts";
import { brokerList, type BrokerList, type Brokers } from "./mqtt-brokers.ts";
import type { MqttProtocol } from "./config.ts";

export type { MqttProtocol };

// CONNACK refusals meaning "I do not speak this protocol version": 3.1.1 return code 1
// (unacceptable protocol version), MQTT 5 reason code 0x84 (unsupported protocol version).
const UNSUPPORTED_PROTOCOL = new Set([0x01, 0x84]);

// The URL schemes MQTT_URL accepts (lib/platform/config.ts), by transport.
const TCP = new Set(["mqtt:", "tcp:"]);
const TLS = new Set(["mqtts:", "tls:", "ssl:"]);
const WS = new Set(["ws:", "wss:"]);
const DEFAULT_PORT: Readonly<Record<string, number>> = { "mqtt:": 1883, "tcp:": 1883, "mqtts:": 8883, "tls:": 8883, "ssl:": 8883, "ws:": 80, "wss:": 443 };

/** A connection attempt that got no CONNACK: the broker (or the connect timeout) closed it first. */
export class NoConnackError extends Error {
  override name = "NoConnackError";
}

export interface MqttConnectOptions extends IClientOptions {
  /** Which protocol version to speak (default auto); overrides protocolVersion. */
  readonly version?: MqttProtocol;
  /** Hears why the connection failed, once per cause until the next successful connect. */
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

/** What one connection attempt has seen: a transport that opened, and a CONNACK on it. */
interface Attempt {
  /** The broker it went to: its place in the list. */
  readonly index: number;
  established: boolean;
  answered: boolean;
  /** The CONNACK accepted it: a session was up. */
  accepted: boolean;
  /** Ended for the protocol fallback: the next attempt tries the same broker in the other version. */
  stay: boolean;
}

const newAttempt = (index: number): Attempt => ({ index, established: false, answered: false, accepted: false, stay: false });

/** A client for one broker, or for the broker in use of a list (moving on when its connection ends). */
export function connectMqtt(brokers: Brokers, options: MqttConnectOptions): MqttClient {
  const { onError, tap, version = "auto", ...clientOptions } = options;
  const list = brokerList(brokers);
  const targets = list.urls.map(targetOf);
  const first = targets[0] as Target;
  const clientConfig: IClientOptions = {
    // A refused CONNECT (server unavailable, busy, or the protocol fallback below) is retried.
    reconnectOnConnackError: true,
    // mqtt.js formats a debug line per packet even when debugging is off: measurable per message.
    log: () => {},
    ...clientOptions,
    protocolVersion: version === "3.1.1" ? 4 : version === "5" ? 5 : (clientOptions.protocolVersion ?? 5),
  };
  // As mqtt.connect does: a clientId in the URL's query wins over the options'. The first URL's
  // only: a session is the client id's, and it must stay one across the brokers.
  const queryClientId = first.url.searchParams.get("clientId");
  if (queryClientId !== null) clientConfig.clientId = queryClientId;
  let attempt = newAttempt(list.current.index);
  const open = (): IStream => {
    const current = newAttempt(list.current.index);
    attempt = current;
    const target = targets[current.index] as Target;
    // mqtt.js reads the credentials from this object when it sends the CONNECT, after this.
    Object.assign(clientConfig, { username: clientOptions.username, password: clientOptions.password }, credentialsOf(target.url));
    return openStream(target, clientConfig, () => (current.established = true));
  };
  const client = new MqttClient(tap ? () => tap(open()) : open, clientConfig);
  followProtocol(client, version === "auto", () => attempt, onceEach(onError), list);
  return client;
}

/** `report`, called again only for another cause; a successful connect (reset) starts over. */
function onceEach(report: ((error: Error) => void) | undefined): { report: (error: Error) => void; reset: () => void } {
  let last: string | undefined;
  return {
    report(error) {
      const cause = `${error.name}:${reasonCodeOf(error) ?? ""}:${error.message}`;
      if (cause === last) return;
      last = cause;
      report?.(error);
    },
    reset: () => (last = undefined),
  };
}

/**
 * The protocol fallback and the failure reports. Until a CONNACK accepts one version (auto),
 * an attempt refused for its version, or closed after the transport opened but before any
 * CONNACK, makes the next one speak the other version.
 */
function followProtocol(client: MqttClient, auto: boolean, attempt: () => Attempt, failures: ReturnType<typeof onceEach>, list: BrokerList): void {
  let settled = !auto;
  const other = (): void => void (client.options.protocolVersion = client.options.protocolVersion === 4 ? 5 : 4);
  const version = (): string => (client.options.protocolVersion === 4 ? "3.1.1" : "5");
  client.on("packetreceive", (packet) => {
    if (packet.cmd === "connack") attempt().answered = true;
  });
  client.on("connect", () => {
    settled = true;
    attempt().accepted = true;
    failures.reset();
  });
  // Without an 'error' listener an error event would throw; the reconnect loop recovers.
  client.on("error", (error) => {
    const code = reasonCodeOf(error);
    if (!settled && client.options.protocolVersion === 5 && code !== undefined && UNSUPPORTED_PROTOCOL.has(code)) {
      other(); // the next reconnect speaks 3.1.1, to the same broker
      attempt().stay = true;
      return;
    }
    failures.report(error);
  });
  client.on("close", () => {
    const current = attempt();
    if (current.established && !current.answered) {
      failures.report(new NoConnackError(`no CONNACK for the MQTT ${version()} CONNECT: the connection closed first`));
      if (!settled) other();
      // From 5 to 3.1.1 the same broker gets another try; back to 5, both versions failed there.
      if (!settled && client.options.protocolVersion === 4) current.stay = true;
    }
    // Our own end() moves nothing; the protocol fallback tries the same broker again.
    if (client.disconnecting || current.stay) return;
    list.leave(current.index, current.accepted);
  });
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

/** The connection to `target`; `established` is called once its transport is open (before any MQTT). */
function openStream(target: Target, options: IClientOptions, established: () => void): IStream {
  const { url, host, port } = target;
  if (TCP.has(url.protocol)) return tcpConnect({ host, port }).once("connect", established);
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
    return tlsConnect(tlsOptions).once("secureConnect", established);
  }
  if (WS.has(url.protocol)) {
    // The WebSocket subprotocol for MQTT 3.1.1 and 5 (MQTT 5 §6).
    const socket = new WebSocket(`${url.protocol}//${url.host}${url.pathname}${url.search}`, ["mqtt"]);
    socket.once("open", established);
    const stream = createWebSocketStream(socket);
    socket.on("close", () => stream.destroy());
    return stream;
  }
  throw new Error(`MQTT URL: unsupported protocol "${url.protocol}"`);
}

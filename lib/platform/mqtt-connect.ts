// One way to open an mqtt.js client for the relay and the subscriber. `auto` tries MQTT 5 and falls
// back to 3.1.1 when the broker refuses 5 or closes without a CONNACK, until a restart.
import { connect as tcpConnect, isIP } from "node:net";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import { MqttClient, type IClientOptions, type IStream } from "mqtt";
import WebSocket, { createWebSocketStream } from "ws";
import { reasonCodeOf } from "./mqtt-errors.ts";
import { brokerList, type BrokerList, type Brokers } from "./mqtt-brokers.ts";
import type { MqttProtocol } from "./config.ts";

export type { MqttProtocol };

// CONNACK refusals of the protocol version: 3.1.1 return code 1, MQTT 5 reason code 0x84.
const UNSUPPORTED_PROTOCOL = new Set([0x01, 0x84]);

// MQTT_URL's schemes: their transport and default port.
const SCHEMES: Readonly<Record<string, readonly ["tcp" | "tls" | "ws", number]>> = {
  "mqtt:": ["tcp", 1883],
  "tcp:": ["tcp", 1883],
  "mqtts:": ["tls", 8883],
  "tls:": ["tls", 8883],
  "ssl:": ["tls", 8883],
  "ws:": ["ws", 80],
  "wss:": ["ws", 443],
};

/** A connection attempt that got no CONNACK: the broker (or the connect timeout) closed it first. */
class NoConnackError extends Error {
  override name = "NoConnackError";
}

/** `version` (default auto) overrides protocolVersion; `tap` wraps each connection before mqtt.js reads it. */
interface MqttConnectOptions extends IClientOptions {
  readonly version?: MqttProtocol;
  readonly onError?: (error: Error) => void;
  readonly tap?: (stream: IStream) => IStream;
}

type Target = ReturnType<typeof targetOf>;

// What one connection attempt (to the broker at `index`) has seen; `stay`: the next attempt tries
// the same broker in the other version.
interface Attempt {
  readonly index: number;
  established: boolean;
  answered: boolean;
  accepted: boolean;
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
  // As mqtt.connect does, a clientId in the (first) URL's query wins: one session across brokers.
  const queryClientId = first.url.searchParams.get("clientId");
  if (queryClientId !== null) clientConfig.clientId = queryClientId;
  let attempt = newAttempt(list.index);
  const open = (): IStream => {
    const current = newAttempt(list.index);
    attempt = current;
    const target = targets[current.index] as Target;
    // mqtt.js reads the credentials from this object when it sends the CONNECT, after this.
    Object.assign(clientConfig, { username: clientOptions.username, password: clientOptions.password }, credentialsOf(target.url));
    return openStream(target, clientConfig, () => (current.established = true));
  };
  const client = new MqttClient(tap ? () => tap(open()) : open, clientConfig);
  followProtocol(client, version === "auto", () => attempt, onError, list);
  return client;
}

// The protocol fallback and the failure reports. Until a CONNACK accepts one version (auto), an
// attempt refused for its version, or closed with its transport open but no CONNACK, flips it.
function followProtocol(
  client: MqttClient,
  auto: boolean,
  attempt: () => Attempt,
  onError: MqttConnectOptions["onError"],
  list: BrokerList,
): void {
  let settled = !auto;
  // Each cause is reported once, until a successful connect starts over.
  let lastCause: string | undefined;
  const report = (error: Error): void => {
    const cause = `${error.name}:${reasonCodeOf(error) ?? ""}:${error.message}`;
    if (cause !== lastCause) onError?.(error);
    lastCause = cause;
  };
  const other = (): void => void (client.options.protocolVersion = client.options.protocolVersion === 4 ? 5 : 4);
  const version = (): string => (client.options.protocolVersion === 4 ? "3.1.1" : "5");
  client.on("packetreceive", (packet) => {
    if (packet.cmd === "connack") attempt().answered = true;
  });
  client.on("connect", () => {
    settled = true;
    attempt().accepted = true;
    lastCause = undefined;
  });
  // Without an 'error' listener an error event would throw; the reconnect loop recovers.
  client.on("error", (error) => {
    const code = reasonCodeOf(error);
    if (!settled && client.options.protocolVersion === 5 && code !== undefined && UNSUPPORTED_PROTOCOL.has(code)) {
      other(); // the next reconnect speaks 3.1.1, to the same broker
      attempt().stay = true;
      return;
    }
    report(error);
  });
  client.on("close", () => {
    const current = attempt();
    if (current.established && !current.answered) {
      report(new NoConnackError(`no CONNACK for the MQTT ${version()} CONNECT: the connection closed first`));
      if (!settled) other();
      // From 5 to 3.1.1 the same broker gets another try; back to 5, both versions failed there.
      if (!settled && client.options.protocolVersion === 4) current.stay = true;
    }
    // Our own end() moves nothing; the protocol fallback tries the same broker again.
    if (client.disconnecting || current.stay) return;
    list.leave(current.index, current.accepted);
  });
}

function targetOf(raw: string) {
  const url = new URL(raw);
  const scheme = SCHEMES[url.protocol];
  if (scheme === undefined) throw new Error(`MQTT URL: unsupported protocol "${url.protocol}" (mqtt:, mqtts:, tcp:, tls:, ssl:, ws:, wss:)`);
  // WHATWG keeps an IPv6 host in brackets; sockets want it bare.
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || "localhost";
  return { url, transport: scheme[0], host, port: url.port === "" ? scheme[1] : Number(url.port) };
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
  if (target.transport === "tcp") return tcpConnect({ host, port }).once("connect", established);
  if (target.transport === "tls") {
    const { ca, cert, key, servername } = options;
    // SNI takes a name, not an address.
    const sni = servername ?? (isIP(host) === 0 ? host : undefined);
    const rejectUnauthorized = options.rejectUnauthorized !== false;
    const tlsOptions: ConnectionOptions = { host, port, servername: sni, rejectUnauthorized, ca, cert, key };
    return tlsConnect(tlsOptions).once("secureConnect", established);
  }
  // The WebSocket subprotocol for MQTT 3.1.1 and 5 (MQTT 5 §6).
  const socket = new WebSocket(`${url.protocol}//${url.host}${url.pathname}${url.search}`, ["mqtt"]);
  socket.once("open", established);
  const stream = createWebSocketStream(socket);
  socket.on("close", () => stream.destroy());
  return stream;
}

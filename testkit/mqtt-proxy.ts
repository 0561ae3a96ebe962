// A TCP proxy in front of a broker that reads what each client connection sends: its CONNECT
// and, in order, its PUBLISHes, decoded by mqtt-packet (the reference encoder), in the MQTT
// version the CONNECT names. A test sees which connection carried which message, and can cut
// one connection as a network would. A client that falls back from MQTT 5 to 3.1.1 (against
// the embedded broker) shows as one refused connection, then another.
import mqttPacket, { type IConnectPacket, type IPublishPacket, type Packet } from "mqtt-packet";
import { connect, createServer, type AddressInfo } from "node:net";

export interface ProxiedConnection {
  /** From its CONNECT. */
  readonly clientId: string | undefined;
  /** Every PUBLISH the client sent on this connection, in the order it sent them. */
  readonly publishes: readonly IPublishPacket[];
  /** Closes both sides at once, as a network failure would (no DISCONNECT). */
  cut(): void;
}

export interface MqttProxy {
  readonly url: string;
  /** In the order the proxy accepted them. */
  readonly connections: readonly ProxiedConnection[];
  /** Called on every PUBLISH a client sends, once it is recorded. */
  onPublish: (connection: ProxiedConnection, packet: IPublishPacket) => void;
  close(): Promise<void>;
}

export async function mqttProxy(brokerUrl: string): Promise<MqttProxy> {
  const target = new URL(brokerUrl);
  const connections: ProxiedConnection[] = [];
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 1883), target.hostname);
    const publishes: IPublishPacket[] = [];
    let open = true;
    const connection = {
      clientId: undefined as string | undefined,
      publishes,
      cut: () => {
        open = false;
        client.destroy();
        upstream.destroy();
      },
    };
    connections.push(connection);
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    parser.on("packet", (packet: Packet) => {
      // mqtt-packet's parser reads the packets after a CONNECT in the version that CONNECT names.
      if (packet.cmd === "connect") connection.clientId = (packet as IConnectPacket).clientId;
      // What followed the cut in the same read was never forwarded.
      if (packet.cmd !== "publish" || !open) return;
      publishes.push(packet);
      proxy.onPublish(connection, packet);
    });
    client.on("data", (bytes: Buffer) => void parser.parse(bytes));
    // pipe() holds a side back while the other is full.
    client.pipe(upstream);
    upstream.pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const proxy: MqttProxy = {
    url: `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections,
    onPublish: () => {},
    close: async () => {
      for (const connection of connections) connection.cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}

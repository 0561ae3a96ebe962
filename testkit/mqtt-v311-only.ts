// A stand-in for the MQTT 3.1.1-only brokers that close the connection on an MQTT 5 CONNECT
// instead of answering it with a CONNACK: in front of a real broker, it reads each
// connection's CONNECT (mqtt-packet, the reference decoder), drops a version 5 one without a
// word, and relays a 3.1.1 one, and everything after it, to the broker.
import mqttPacket, { type IConnectPacket, type Packet } from "mqtt-packet";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";

export interface V311OnlyBroker {
  readonly url: string;
  /** The protocol version of each CONNECT received, in order (5, or 4 for 3.1.1). */
  readonly attempts: readonly number[];
  /** Cuts every open connection, as a broker restart would; it goes on accepting new ones. */
  cutAll(): void;
  close(): Promise<void>;
}

export async function v311OnlyBroker(brokerUrl: string): Promise<V311OnlyBroker> {
  const target = new URL(brokerUrl);
  const attempts: number[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    const received: Buffer[] = [];
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    const onData = (bytes: Buffer): void => {
      received.push(bytes);
      parser.parse(bytes);
    };
    parser.once("packet", (packet: Packet) => {
      const version = packet.cmd === "connect" ? ((packet as IConnectPacket).protocolVersion ?? 4) : 0;
      attempts.push(version);
      if (version !== 4) return void client.destroy();
      client.off("data", onData);
      const upstream = connect(Number(target.port || 1883), target.hostname, () => {
        upstream.write(Buffer.concat(received));
        client.pipe(upstream);
        upstream.pipe(client);
      });
      sockets.add(upstream);
      upstream.on("error", () => client.destroy());
      upstream.on("close", () => (sockets.delete(upstream), client.destroy()));
      client.on("close", () => upstream.destroy());
    });
    client.on("data", onData);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}`,
    attempts,
    cutAll: () => {
      for (const socket of sockets) socket.destroy();
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

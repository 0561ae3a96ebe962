// A TCP link that can be cut silently, for a process's connection to a server (the relay's to
// the broker): while cut, whatever either side sends is lost, with no reset and no close, so
// the sender learns of it only by its own bounds; when healed, the connections that lived
// through the cut are closed (as their keep-alive would have ended them) and new ones pass.
// What the plain `testkit/http-fault-proxy.ts` does for HTTP, without Docker, for any TCP.
import { connect, createServer, type Socket } from "node:net";

export interface CuttableLink {
  readonly port: number;
  /** From now on, bytes either way are dropped. */
  cut(): void;
  /** Closes the connections the cut hit; new ones pass again. */
  heal(): void;
  close(): Promise<void>;
}

export async function cuttableLink(targetPort: number, host = "127.0.0.1"): Promise<CuttableLink> {
  let cut = false;
  const pairs = new Set<{ client: Socket; server: Socket; hit: boolean }>();
  const server = createServer((client) => {
    const upstream = connect({ port: targetPort, host });
    const pair = { client, server: upstream, hit: cut };
    pairs.add(pair);
    const pipe = (from: Socket, to: Socket): void => {
      from.on("data", (chunk: Buffer) => {
        if (cut) pair.hit = true;
        else to.write(chunk);
      });
      from.on("error", () => {});
      from.on("close", () => {
        to.destroy();
        pairs.delete(pair);
      });
    };
    pipe(client, upstream);
    pipe(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return {
    port: (server.address() as { port: number }).port,
    cut() {
      cut = true;
      for (const pair of pairs) pair.hit = true;
    },
    heal() {
      cut = false;
      for (const pair of [...pairs]) if (pair.hit) pair.client.destroy(), pair.server.destroy();
    },
    close() {
      for (const pair of pairs) pair.client.destroy(), pair.server.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

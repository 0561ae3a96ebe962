// An in-process MQTT broker (aedes) for `bun run dev` and for tests with no broker
// installed. Aedes speaks MQTT 3.1.1 only: it refuses an MQTT 5 CONNECT, so clients
// that want MQTT 5 features must fall back to 3.1.1 against it.
import { Aedes } from "aedes";
import { createServer, type Server } from "node:net";
import { freePort } from "./ports.ts";

// Clients that do not disconnect themselves are cut after this when the broker closes.
const CLOSE_TIMEOUT_MS = 2000;

export interface LocalBroker {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export async function startLocalBroker(port?: number): Promise<LocalBroker> {
  const broker = await Aedes.createBroker();
  const server = createServer(broker.handle);
  const chosen = port ?? (await freePort());
  await listen(server, chosen);
  return {
    url: `mqtt://127.0.0.1:${chosen}`,
    port: chosen,
    close: () => close(broker, server),
  };
}

function listen(server: Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
}

function close(broker: Aedes, server: Server): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
    // Closing the broker disconnects its clients, which lets server.close complete.
    broker.close(() => server.close(() => {
      clearTimeout(timer);
      resolve();
    }));
  });
}

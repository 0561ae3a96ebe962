// Free TCP ports for the services dev mode and the tests start themselves.
import { createServer } from "node:net";

/** Asks the OS for a port nobody listens on. It is free now, not reserved: use it at once. */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error("the OS gave no port"))));
    });
  });
}

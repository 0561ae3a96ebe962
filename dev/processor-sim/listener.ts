// The TCP side of the simulator: one node:http server that can stop listening (the "refuse"
// fault: new connections get ECONNREFUSED, open ones are closed) and listen again on the same
// port. Transitions run one after another, so `settled()` says when the last one took effect.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";

export type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void;

export class Listener {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private transition: Promise<void> = Promise.resolve();
  private listening = false;
  private wanted = true;
  private bound = 0;

  constructor(handler: RequestHandler, private readonly hostname: string) {
    this.server = createServer(handler);
    this.server.on("connection", (socket: Socket) => {
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
    });
  }

  /** Binds for the first time; `port` 0 takes a free one. Answers the bound port. */
  async start(port: number): Promise<number> {
    await this.bind(port);
    const address = this.server.address();
    this.bound = typeof address === "object" && address ? address.port : port;
    return this.bound;
  }

  /** Listen (true) or refuse (false); several calls in a row end in the last one's state. */
  want(listening: boolean): void {
    this.wanted = listening;
    this.transition = this.transition.then(() => this.reach()).catch((error: unknown) => {
      console.error(`processor-sim: cannot listen again on port ${this.bound}: ${String(error)}`);
    });
  }

  /** Resolves once every transition asked for so far has taken effect. */
  settled(): Promise<void> {
    return this.transition;
  }

  async close(): Promise<void> {
    this.wanted = false;
    this.transition = this.transition.then(() => this.reach());
    await this.transition;
  }

  private async reach(): Promise<void> {
    if (this.wanted && !this.listening) await this.bind(this.bound);
    if (!this.wanted && this.listening) await this.unbind();
  }

  private bind(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const failed = (error: Error): void => reject(error);
      this.server.once("error", failed);
      this.server.listen(port, this.hostname, () => {
        this.server.off("error", failed);
        this.listening = true;
        resolve();
      });
    });
  }

  private unbind(): Promise<void> {
    return new Promise((resolve) => {
      this.listening = false;
      this.server.close(() => resolve());
      // Open connections, idle keep-alive ones included, would still reach the server: cut them.
      for (const socket of this.sockets) socket.destroy();
      this.sockets.clear();
    });
  }
}

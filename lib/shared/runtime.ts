// The one place that knows which runtime we are on. Everything else in lib/ uses web
// standard APIs (fetch handlers, Request/Response, crypto) plus node: built-ins that Bun
// and Deno both provide.

export interface Server {
  readonly port: number;
  stop(): Promise<void>;
}

export type FetchHandler = (request: Request) => Response | Promise<Response>;

interface DenoLike {
  serve(
    options: { port: number; hostname?: string; onListen?: (addr: { port: number }) => void },
    handler: FetchHandler,
  ): { addr: { port: number }; shutdown(): Promise<void> };
}

interface BunLike {
  serve(options: { port: number; hostname?: string; fetch: FetchHandler; maxRequestBodySize?: number }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
  };
}

const g = globalThis as unknown as { Bun?: BunLike; Deno?: DenoLike };

/** Serve a fetch handler on a port (0 = any free port). */
export function serve(port: number, fetch: FetchHandler, hostname = "0.0.0.0"): Server {
  if (g.Bun) {
    const server = g.Bun.serve({ port, hostname, fetch });
    return { port: server.port, stop: async () => void (await server.stop(true)) };
  }
  if (g.Deno) {
    const server = g.Deno.serve({ port, hostname, onListen: () => {} }, fetch);
    return { port: server.addr.port, stop: () => server.shutdown() };
  }
  throw new Error("unsupported runtime: run with bun or deno");
}

/** Register a handler for SIGTERM and SIGINT. */
export function onShutdownSignal(handler: (signal: string) => void): void {
  for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => handler(signal));
}

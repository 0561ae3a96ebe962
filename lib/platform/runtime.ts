// The one place that knows which runtime we are on; the rest of lib/ uses web standard APIs and
// the node: built-ins Bun and Deno both provide.
import { within } from "./within.ts";

export interface Server {
  readonly port: number;
  /** Stops accepting connections; requests in flight get up to `graceMs` (default 0), then are cut. */
  stop(graceMs?: number): Promise<void>;
}

export type FetchHandler = (request: Request) => Response | Promise<Response>;
type ErrorHandler = (error: unknown) => Response;

interface DenoLike {
  serve(
    options: { port: number; hostname?: string; reusePort?: boolean; onListen?: (addr: { port: number }) => void; onError?: ErrorHandler },
    handler: FetchHandler,
  ): { addr: { port: number }; shutdown(): Promise<void> };
}

interface BunLike {
  serve(options: { port: number; hostname?: string; reusePort?: boolean; development: boolean; fetch: FetchHandler; error: ErrorHandler }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
  };
}

const g = globalThis as unknown as { Bun?: BunLike; Deno?: DenoLike };

// Serve a fetch handler on a port (0 = any free port), in production mode: a handler that throws is
// answered with a bare RFC 9457 problem, never the runtime's HTML or stack trace.
export function serve(port: number, fetch: FetchHandler, hostname = "0.0.0.0", options: { reusePort?: boolean } = {}): Server {
  const handler: FetchHandler = (request) => fetch(routableRequest(request));
  const reusePort = options.reusePort ?? false;
  if (g.Bun) {
    const server = g.Bun.serve({ port, hostname, reusePort, development: false, fetch: handler, error: internalError });
    return {
      port: server.port,
      async stop(graceMs = 0) {
        const drained = await within(Promise.resolve(server.stop(false)).then(() => true), graceMs);
        if (drained !== true) await server.stop(true);
      },
    };
  }
  if (g.Deno) {
    const server = g.Deno.serve({ port, hostname, reusePort, onListen: () => {}, onError: internalError }, handler);
    // Deno's shutdown is always graceful; past the grace the process exits around it.
    return { port: server.addr.port, stop: async (graceMs = 0) => void (await within(server.shutdown(), graceMs)) };
  }
  throw new Error("unsupported runtime: run with bun or deno");
}

// For requests whose own origin cannot be parsed; no handler uses the host (a Location is a path).
const FALLBACK_ORIGIN = "http://localhost";

// Elysia skips this many characters of the url (the shortest origin, "http://a.b") before the path.
const ELYSIA_ORIGIN_MIN = 11;

// The request re-addressed to FALLBACK_ORIGIN when Bun gave it a bare path (no Host header, as
// HTTP/1.0 health checkers send: `new URL()` throws) or an origin shorter than Elysia skips.
export function routableRequest(request: Request): Request {
  const start = pathStart(request.url);
  if (start < 0 || start >= ELYSIA_ORIGIN_MIN) return request;
  // Not the whole request: reading its signal draws a deprecation warning from Deno.
  const init = { method: request.method, headers: request.headers, body: request.body, duplex: "half" };
  return new Request(FALLBACK_ORIGIN + request.url.slice(start), init as RequestInit);
}

/** Where the path of a bare path or an absolute URL starts; -1 when it has none. */
function pathStart(url: string): number {
  if (url.startsWith("/")) return 0;
  const scheme = url.indexOf("://");
  return scheme < 0 ? -1 : url.indexOf("/", scheme + 3);
}

// A path WHATWG URL parsing leaves as it is: no dot segment, nothing to percent-encode, no
// backslash, not "//" (a host, relative to a base).
const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9\-_~!$&'()*+,;=:@/]*$/;
// An http(s) origin with a plain host and port: no userinfo, nothing that ends the authority early.
const PLAIN_ORIGIN = /^https?:\/\/[A-Za-z0-9.\-:[\]]*$/;

// `new URL(url, FALLBACK_ORIGIN).pathname`, without a per-request URL parse when the path is plain.
export function pathOf(url: string): string {
  const start = pathStart(url);
  if (start === 0 || (start > 0 && PLAIN_ORIGIN.test(url.slice(0, start)))) {
    const query = url.indexOf("?", start);
    const fragment = url.indexOf("#", start);
    const end = Math.min(query < 0 ? url.length : query, fragment < 0 ? url.length : fragment);
    const path = url.slice(start, end);
    if (PLAIN_PATH.test(path)) return path;
  }
  return new URL(url, FALLBACK_ORIGIN).pathname;
}

// Only a bug gets here: the handlers answer their own errors.
function internalError(error: unknown): Response {
  console.error(JSON.stringify({ time: new Date().toISOString(), level: "error", msg: "request handler failed", error: String(error) }));
  const body = { type: "about:blank", title: "Internal Server Error", status: 500, detail: "an unexpected error occurred" };
  return new Response(JSON.stringify(body), { status: 500, headers: { "content-type": "application/problem+json" } });
}

/** Register a handler for SIGTERM and SIGINT. */
export function onShutdownSignal(handler: (signal: string) => void): void {
  for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => handler(signal));
}

// Not written as a literal in import(): Deno and the workerd bundler would try to resolve it.
const BUN_JSC = "bun:jsc";

/** A synchronous young-generation collection (Bun's edenGC) for gc-pacer.ts; undefined on Deno. */
export async function youngCollection(): Promise<(() => void) | undefined> {
  if (!g.Bun) return undefined;
  const jsc = (await import(BUN_JSC)) as { edenGC?: () => number };
  const edenGC = jsc.edenGC;
  return edenGC ? () => void edenGC() : undefined;
}

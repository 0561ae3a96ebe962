// The relay's HTTP surface on RELAY_PORT: /healthz, /readyz and the GET routes start.ts adds.
// Answers are JSON, errors RFC 9457 problems.
import type { Sql } from "../platform/db.ts";
import { probeDatabase } from "../platform/db.ts";
import type { Logger } from "../platform/log.ts";
import type { FetchHandler } from "../platform/runtime.ts";
import { UNMATCHED_ROUTE, type HttpServerMetrics } from "../platform/http-metrics.ts";

interface RelayAppDeps {
  readonly sql: Sql;
  readonly broker: { readonly connected: boolean; readonly lastError?: string | undefined; readonly url?: string };
  readonly routes?: Readonly<Record<string, FetchHandler>>;
  /** Hears why the database is down: the /readyz body only says that it is. */
  readonly logger: Logger;
  readonly httpMetrics?: HttpServerMetrics;
}

const READY_DB_TIMEOUT_MS = 1000;

function json(status: number, body: unknown, type = "application/json", headers = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": type, ...headers } });
}

// "about:blank" problems: the title is the status's own phrase (RFC 9457 §4.2.1).
function problem(status: number, title: string, detail: string, headers: Record<string, string> = {}): Response {
  return json(status, { type: "about:blank", title, status, detail }, "application/problem+json", headers);
}

// Not parsed as a URL: the runtime builds request.url from the Host header, which may be absent or odd.
function pathOf(url: string): string {
  const origin = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/.exec(url);
  const rest = origin ? url.slice(origin[0].length) : url;
  const end = rest.search(/[?#]/);
  const path = end < 0 ? rest : rest.slice(0, end);
  return path.startsWith("/") ? path : `/${path}`;
}

export function createRelayFetch(deps: RelayAppDeps): FetchHandler {
  const routes: Record<string, FetchHandler> = {
    "/healthz": () => json(200, { status: "ok" }),
    "/readyz": async () => {
      const database = await probeDatabase(deps.sql, READY_DB_TIMEOUT_MS);
      if (database.error) deps.logger.warn("readiness: database down", { error: database.error });
      const broker = deps.broker.connected;
      const ready = database.up && broker;
      return json(ready ? 200 : 503, {
        status: ready ? "ready" : "not ready",
        database: database.up ? "up" : "down",
        broker: broker ? "connected" : "disconnected",
        ...(deps.broker.url !== undefined && { brokerUrl: deps.broker.url }),
        ...(!broker && deps.broker.lastError !== undefined && { brokerError: deps.broker.lastError }),
      });
    },
    ...deps.routes,
  };
  const metrics = deps.httpMetrics;
  return async (request) => {
    const started = performance.now();
    const path = pathOf(request.url);
    const known = Object.hasOwn(routes, path);
    const response = await answer(request, path, known ? routes[path] : undefined);
    // A 405 on a known path still names its route: the path is a template with no parameter.
    metrics?.record(request.method, known ? path : UNMATCHED_ROUTE, response.status, (performance.now() - started) / 1000);
    return response;
  };

  async function answer(request: Request, path: string, route: FetchHandler | undefined): Promise<Response> {
    try {
      if (!route) return problem(404, "Not Found", `no route ${path}; this port serves ${Object.keys(routes).join(", ")}`);
      if (request.method !== "GET" && request.method !== "HEAD") {
        return problem(405, "Method Not Allowed", `${path} answers GET and HEAD`, { allow: "GET, HEAD" });
      }
      return await route(request);
    } catch (error) {
      deps.logger.error("relay http handler failed", { error: error instanceof Error ? error.message : String(error) });
      return problem(500, "Internal Server Error", "an unexpected error occurred");
    }
  }
}

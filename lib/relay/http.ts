// The relay's HTTP surface on RELAY_PORT: /healthz, /readyz, and whatever GET routes the
// entrypoint adds (/metrics comes with the observability work).
import type { Sql } from "../shared/db.ts";
import { probeDatabase } from "../shared/db.ts";
import type { FetchHandler } from "../shared/runtime.ts";

export interface RelayAppDeps {
  readonly sql: Sql;
  readonly broker: { readonly connected: boolean };
  /** Extra GET routes by exact path, e.g. { "/metrics": handler }. */
  readonly routes?: Readonly<Record<string, FetchHandler>>;
}

// A readiness probe must answer quickly even when the database hangs; past this it is "down".
const READY_DB_TIMEOUT_MS = 1000;

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

export function createRelayFetch(deps: RelayAppDeps): FetchHandler {
  const routes: Record<string, FetchHandler> = {
    "/healthz": () => json(200, { status: "ok" }),
    "/readyz": async () => {
      const database = await probeDatabase(deps.sql, READY_DB_TIMEOUT_MS);
      const broker = deps.broker.connected;
      const ready = database.up && broker;
      return json(ready ? 200 : 503, {
        status: ready ? "ready" : "not ready",
        database: database.up ? "up" : "down",
        broker: broker ? "connected" : "disconnected",
        ...(database.error ? { databaseError: database.error } : {}),
      });
    },
    ...deps.routes,
  };
  return (request) => {
    const route = routes[new URL(request.url).pathname];
    if (!route) return json(404, { status: "not found" });
    if (request.method !== "GET" && request.method !== "HEAD") {
      return new Response(null, { status: 405, headers: { allow: "GET, HEAD" } });
    }
    return route(request);
  };
}

// The operator console, assembled for the API process: its reads and actions on the API's pool
// (lib/ops), the processor client a resolve reads through, and the operator token check on the
// API's own key source. start.ts routes /console and below here, on the operator listener.
import type { Config } from "../../platform/config.ts";
import type { Sql } from "../../platform/db.ts";
import type { Logger } from "../../platform/log.ts";
import { createProcessorClient } from "../../charges/processor.ts";
import { leaseMsFor } from "../../idempotency/drive.ts";
import { createOperatorCheck } from "./auth.ts";
import { createConsole } from "./routes.ts";
import { pathOf } from "../../platform/runtime.ts";

export type FetchHandler = (request: Request) => Promise<Response>;

export function createApiConsole(config: Config, sql: Sql, log: Logger): FetchHandler {
  const processor = config.processor.mode === "none" ? undefined : createProcessorClient(config.processor);
  return createConsole({ check: createOperatorCheck(config.auth), ops: { sql, log, processor, leaseMs: leaseMsFor(config.processor.timeoutMs) } });
}

export function withConsole(serve: FetchHandler, console: FetchHandler): FetchHandler {
  return (request) => {
    const path = pathOf(request.url);
    return path === "/console" || path.startsWith("/console/") ? console(request) : serve(request);
  };
}

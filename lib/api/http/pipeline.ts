// The API's entry, built here by the server (start.ts) and the edge worker (worker.ts): the Elysia app
// (app.ts) built once, every request handed to it through routableRequest.
import type { TSchema } from "@sinclair/typebox";
import { routableRequest } from "../../platform/runtime.ts";
import { prepareSchemas, registerHeaderFormats } from "../schemas.ts";
import { buildApp, type AppOptions } from "../app.ts";
import type { RequestDeps } from "./context.ts";

/** `deps` are read while a request is served: the worker's resolve to that request's own. */
export function createApi(schemas: readonly TSchema[], deps: RequestDeps, options: AppOptions = {}) {
  prepareSchemas(schemas);
  registerHeaderFormats();
  const app = buildApp(deps, options);
  // Handlers answer stored bytes, which Elysia does not check against `responses`: api-schema.test.ts does.
  const routes = app.routes.flatMap((r) => {
    const operationId = r.hooks?.detail?.operationId;
    const responses = (r.hooks?.response ?? {}) as Record<string, TSchema>;
    return typeof operationId === "string" ? [{ method: r.method, path: r.path, operationId, responses }] : [];
  });
  return { handle: (request: Request): Promise<Response> => app.handle(routableRequest(request)), routes };
}

export function createApiHandler(schemas: readonly TSchema[], deps: RequestDeps, options: AppOptions = {}) {
  return createApi(schemas, deps, options).handle;
}

// Helpers for tests that drive the API in-process through its fetch handler.
import { loadConfig } from "../lib/platform/config.ts";
import { startApi, type ApiOptions, type ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/platform/db.ts";
import { afterAll, beforeEach } from "bun:test";
import { freshDatabase, type TestDatabase } from "./services.ts";
import { waitForBackendOnLock } from "./database.ts";
import { API_APP } from "./processes.ts";
import { authEnv, authHeaders, TEST_TENANT } from "./auth.ts";

/** The application_name of the in-process API's pool. */
export const TEST_API_APP = API_APP;

/** An in-process API that accepts the kit's tokens (authEnv()); `env` may override. */
export async function startTestApi(databaseUrl: string, env: Record<string, string> = {}, options: ApiOptions = {}): Promise<ApiProcess> {
  // The pool opens on demand here: a file may hold several of these APIs on one server
  // (max_connections 100); test/api-pool-open.test.ts checks the opening of the real process.
  return startApi(loadConfig({ DATABASE_URL: databaseUrl, LOG_LEVEL: "warn", ...authEnv(), ...env }), { openPool: false, ...options });
}

export interface PostOptions {
  readonly key?: string | null;
  readonly contentType?: string;
  readonly headers?: Record<string, string>;
  /** Whose token goes with the request (default TEST_TENANT); null sends none. */
  readonly tenant?: string | null;
}

/** POST /charges with a token of `options.tenant` (headers may override Authorization). */
export async function postCharge(api: ApiProcess, body: string, options: PostOptions = {}): Promise<Response> {
  const auth = options.tenant === null ? {} : await authHeaders(options.tenant ?? TEST_TENANT);
  const headers: Record<string, string> = { "content-type": options.contentType ?? "application/json", ...auth, ...options.headers };
  if (options.key !== null && options.key !== undefined) headers["idempotency-key"] = options.key;
  return api.fetch(new Request("http://localhost/charges", { method: "POST", headers, body }));
}

/** GET /charges/:id with a token of `tenant`. */
export async function getCharge(api: ApiProcess, id: string, tenant: string = TEST_TENANT): Promise<Response> {
  return api.fetch(new Request(`http://localhost/charges/${id}`, { headers: await authHeaders(tenant) }));
}

export async function counts(sql: Sql): Promise<{ charges: number; outbox: number; keys: number }> {
  const [row] = await sql<{ charges: number; outbox: number; keys: number }[]>`
    select (select count(*) from charges)::int as charges,
           (select count(*) from outbox)::int as outbox,
           (select count(*) from idempotency_keys)::int as keys`;
  return row!;
}

/** Waits, by polling pg_stat_activity (never a fixed sleep), until an API backend waits on a lock; its pid. */
export function waitForApiBlockedOnLock(sql: Sql, timeoutMs = 10_000): Promise<number> {
  return waitForBackendOnLock(sql, TEST_API_APP, timeoutMs);
}

/**
 * For a test file: its own database and an in-process API on it, both closed after the
 * file, and the three tables emptied before each test.
 */
export async function apiTestContext(label: string): Promise<{ db: TestDatabase; api: ApiProcess }> {
  const db = await freshDatabase(label);
  const api = await startTestApi(db.url);
  afterAll(async () => {
    await api.close();
    await db.drop();
  });
  beforeEach(async () => {
    await db.sql`truncate outbox, idempotency_keys, refunds, charges`;
  });
  return { db, api };
}

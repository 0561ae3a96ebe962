// Helpers for tests that drive the API in-process through its fetch handler.
import { loadConfig } from "../lib/shared/config.ts";
import { startApi, type ApiOptions, type ApiProcess } from "../lib/api/start.ts";
import type { Sql } from "../lib/shared/db.ts";
import { afterAll, beforeEach } from "bun:test";
import { freshDatabase, type TestDatabase } from "./services.ts";
import { waitForBackendOnLock } from "./database.ts";
import { API_APP } from "./processes.ts";

/** The application_name of the in-process API's pool. */
export const TEST_API_APP = API_APP;

export async function startTestApi(databaseUrl: string, env: Record<string, string> = {}, options: ApiOptions = {}): Promise<ApiProcess> {
  return startApi(loadConfig({ DATABASE_URL: databaseUrl, LOG_LEVEL: "warn", ...env }), options);
}

export interface PostOptions {
  readonly key?: string | null;
  readonly contentType?: string;
  readonly headers?: Record<string, string>;
}

export function postCharge(api: ApiProcess, body: string, options: PostOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { "content-type": options.contentType ?? "application/json", ...options.headers };
  if (options.key !== null && options.key !== undefined) headers["idempotency-key"] = options.key;
  return Promise.resolve(api.fetch(new Request("http://localhost/charges", { method: "POST", headers, body })));
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
    await db.sql`truncate outbox, idempotency_keys, charges`;
  });
  return { db, api };
}

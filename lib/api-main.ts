// Assembles the API process from config: the pool, the schema, the service and the app.
import type { Config } from "./config.ts";
import { createSql, describeDbError, migrate, type Sql } from "./db.ts";
import { createChargeService } from "./charges.ts";
import { buildApp, type RequestEvent } from "./http/app.ts";

// Enough connections to keep Postgres's two cores busy and let group commit batch the
// WAL flushes of concurrent charges; more only adds context switches on this size of box.
export const API_POOL_SIZE = 16;

export interface ApiProcess {
  readonly sql: Sql;
  readonly fetch: (request: Request) => Response | Promise<Response>;
  close(): Promise<void>;
}

export interface ApiOptions {
  readonly onCreated?: () => void;
  readonly onRequest?: (event: RequestEvent) => void;
  readonly metrics?: () => Promise<Response>;
}

/** Connects and migrates; an unreachable database is a one-line error for the caller. */
export async function startApi(config: Config, options: ApiOptions = {}): Promise<ApiProcess> {
  const sql = createSql(config.databaseUrl, { max: API_POOL_SIZE, applicationName: "charges-api" });
  try {
    await migrate(sql);
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new StartupError(`cannot reach or migrate the database at DATABASE_URL: ${describeDbError(error)}`);
  }
  const charges = createChargeService(sql, { ttlSeconds: config.idempotencyTtlSeconds, onCreated: options.onCreated });
  const app = buildApp({ sql, charges, metrics: options.metrics, onRequest: options.onRequest });
  return {
    sql,
    fetch: (request) => app.handle(request),
    close: () => sql.end({ timeout: 5 }),
  };
}

export class StartupError extends Error {
  override name = "StartupError";
}

// Throwaway databases for tests, chaos scenarios and benchmarks: created on a server the
// caller names, schema applied, dropped (with any backend still on it) when done.
import { createSql, migrate, type Sql } from "../../lib/db.ts";

export interface ScratchDatabase {
  readonly name: string;
  readonly url: string;
  /** A pool on the new database; postgres.js connects lazily, so an unused one costs nothing. */
  readonly sql: Sql;
  drop(): Promise<void>;
}

export interface ScratchOptions {
  /** Pool size of `sql`. */
  readonly max?: number;
  /** Apply schema.sql (default true); false leaves it to the processes under test. */
  readonly migrate?: boolean;
  readonly applicationName?: string;
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** `<prefix>_<label>_<random>`, from [a-z0-9_] only: identifiers cannot be query parameters. */
export function scratchName(prefix: string, label: string): string {
  const clean = (s: string) => s.replace(/[^a-z0-9]/gi, "_").toLowerCase();
  return `${clean(prefix)}_${clean(label)}_${crypto.randomUUID().slice(0, 8)}`;
}

export async function createScratchDatabase(adminUrl: string, name: string, options: ScratchOptions = {}): Promise<ScratchDatabase> {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`bug: unsafe database name ${JSON.stringify(name)}`);
  const admin = createSql(adminUrl, { max: 1, applicationName: "charges-scratch-admin" });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end({ timeout: 2 });
  }
  const url = withDatabase(adminUrl, name);
  const sql = createSql(url, { max: options.max ?? 4, applicationName: options.applicationName ?? "charges-scratch" });
  if (options.migrate ?? true) await migrate(sql);
  return {
    name,
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 2 });
      const dropper = createSql(adminUrl, { max: 1, applicationName: "charges-scratch-admin" });
      try {
        await dropper.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await dropper.end({ timeout: 2 });
      }
    },
  };
}

// Where the tests find Postgres and MQTT, in this order:
//   1. DATABASE_URL / MQTT_URL when set (CI points them at this machine's services);
//   2. Testcontainers when a Docker engine answers (postgres:16-alpine, eclipse-mosquitto:2);
//   3. otherwise a clear message saying what to set.
// Each test file asks for its own fresh database so files can run in parallel.
import { createSql, migrate, type Sql } from "../../lib/db.ts";
import { dockerAnswers, startContainers } from "./containers.ts";

export type ServiceSource = "env" | "docker" | "none";

export interface Services {
  readonly source: ServiceSource;
  /** A database URL the tests may CREATE DATABASE from. */
  readonly adminDatabaseUrl: string;
  readonly mqttUrl: string;
}

export interface ServiceProbe {
  readonly env: Record<string, string | undefined>;
  readonly dockerAnswers: () => Promise<boolean>;
}

/** The choice between the sources, kept pure so it can be unit-tested. */
export async function chooseSource(probe: ServiceProbe): Promise<ServiceSource> {
  if (probe.env.DATABASE_URL && probe.env.MQTT_URL) return "env";
  if (await probe.dockerAnswers()) return "docker";
  return "none";
}

let cached: Promise<Services> | undefined;

export function services(): Promise<Services> {
  cached ??= resolve();
  return cached;
}

async function resolve(): Promise<Services> {
  const env = process.env;
  const source = await chooseSource({ env, dockerAnswers });
  if (source === "env") {
    return { source, adminDatabaseUrl: env.DATABASE_URL!, mqttUrl: env.MQTT_URL! };
  }
  if (source === "docker") {
    const started = await startContainers();
    return { source, ...started };
  }
  throw new Error(
    "tests need Postgres and MQTT: set DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres) " +
      "and MQTT_URL (e.g. mqtt://127.0.0.1:1883), or start a Docker engine for Testcontainers",
  );
}

export interface TestDatabase {
  readonly url: string;
  readonly name: string;
  readonly sql: Sql;
  drop(): Promise<void>;
}

/** A new database with the schema applied, for one test file. */
export async function freshDatabase(label: string): Promise<TestDatabase> {
  const { adminDatabaseUrl } = await services();
  const name = `t_${label.replace(/[^a-z0-9]/gi, "_").toLowerCase()}_${crypto.randomUUID().slice(0, 8)}`;
  const admin = createSql(adminDatabaseUrl, { max: 1, applicationName: "charges-test-admin" });
  // Identifiers cannot be parameters; the name is built above from [a-z0-9_] only.
  await admin.unsafe(`create database ${name}`);
  const url = withDatabase(adminDatabaseUrl, name);
  const sql = createSql(url, { max: 4, applicationName: "charges-test" });
  await migrate(sql);
  return {
    url,
    name,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      await admin.unsafe(`drop database if exists ${name} with (force)`);
      await admin.end({ timeout: 5 });
    },
  };
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

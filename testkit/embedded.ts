// The "embedded" test source: the same embedded Postgres and in-process aedes broker as
// `bun run dev`, for a machine with neither the variables nor Docker. The cluster lives in
// .data/test-postgres (apart from dev's .data/postgres), kept across runs so only the
// first run pays for initdb; as root in a directory the postgres user cannot reach, in the
// temp dir's cache folder instead (dev/pg-place.ts). Whatever variable is set is used as is;
// a broker handed over by another process (services.ts: handedOver) says TEST_MQTT5=0 when it
// is that process's aedes.
import { DATA_DIR, startEmbeddedPostgres } from "../dev/embedded-postgres.ts";
import { startLocalBroker } from "../dev/mqtt-broker.ts";

export interface EmbeddedServices {
  readonly adminDatabaseUrl: string;
  readonly mqttUrl: string;
  /** aedes speaks MQTT 3.1.1 only. */
  readonly mqtt5: boolean;
}

export async function startEmbedded(env: Record<string, string | undefined>): Promise<EmbeddedServices> {
  const adminDatabaseUrl = env.DATABASE_URL || (await embeddedPostgresUrl());
  if (env.MQTT_URL) return { adminDatabaseUrl, mqttUrl: env.MQTT_URL, mqtt5: env.TEST_MQTT5 !== "0" };
  // In this process: it ends with the test run, nothing to stop.
  const broker = await startLocalBroker();
  return { adminDatabaseUrl, mqttUrl: broker.url, mqtt5: false };
}

async function embeddedPostgresUrl(): Promise<string> {
  // Not detached: a Ctrl-C on `bun test` reaches Postgres too. `bun test` fires no exit
  // event, so the watchdog started with it shuts it down once this process is gone.
  const pg = await startEmbeddedPostgres({ dataDir: `${DATA_DIR}test-postgres`, detached: false, log: () => {} });
  return pg.url;
}

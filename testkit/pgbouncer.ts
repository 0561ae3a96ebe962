// A PgBouncer of our own in front of the test Postgres, in transaction mode (the common
// deployment: docs/operations.md, "Behind PgBouncer"), on a free port with its own ini file
// in a temp folder, so nothing of the machine's is touched. Its settings are a stock
// install's but for the mode and the pool size: it refuses the startup parameters it does
// not track and keeps no named prepared statements.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { unprivilegedUser } from "../dev/pg-user.ts";
import { freePort } from "../dev/ports.ts";
import { acceptsTcp, spawnChild, type Child } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// PgBouncer listens within milliseconds; a loaded machine gets margin.
const START_TIMEOUT_MS = 10_000;
// Debian's package installs it outside a normal user's PATH.
const DEBIAN_BINARY = "/usr/sbin/pgbouncer";
// Server connections per database and user unless a test asks for fewer: fewer than the
// clients' connections (an API process alone opens 32), so transactions share them.
const DEFAULT_POOL_SIZE = 8;
// Comfortably above every client connection a test file opens at once.
const MAX_CLIENT_CONNECTIONS = 500;

/** The pgbouncer binary, or undefined when it is not installed. */
export function pgbouncerBinary(): string | undefined {
  return Bun.which("pgbouncer") ?? (existsSync(DEBIAN_BINARY) ? DEBIAN_BINARY : undefined);
}

export interface PrivatePgbouncer {
  readonly port: number;
  /** `databaseUrl` (a database behind this PgBouncer's upstream) through the pooler instead. */
  urlFor(databaseUrl: string): string;
  /** Its log so far (connections refused, errors), for a failed assertion's message. */
  output(): string;
  stop(): Promise<void>;
}

export interface PgbouncerOptions {
  /** Server connections per database and user (default_pool_size). */
  readonly poolSize?: number;
}

/** Started in front of `upstreamUrl`'s server (host, port, user and password), pool_mode = transaction. */
export async function privatePgbouncer(upstreamUrl: string, options: PgbouncerOptions = {}): Promise<PrivatePgbouncer> {
  const binary = pgbouncerBinary();
  if (binary === undefined) throw new Error("a private PgBouncer needs `pgbouncer` installed (e.g. apt-get install pgbouncer)");
  const upstream = new URL(upstreamUrl);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "testkit-pgbouncer-"));
  const ini = join(dir, "pgbouncer.ini");
  writeConfig(dir, ini, upstream, port, options.poolSize ?? DEFAULT_POOL_SIZE);
  // PgBouncer refuses to run as root: it reads its files, then drops to `postgres`.
  const runAs = unprivilegedUser(() => {});
  const child: Child = spawnChild([binary, ...(runAs ? ["-u", runAs.name] : []), ini], { name: `pgbouncer :${port}` });
  try {
    await waitUntil(
      () => {
        if (child.exited) throw new Error(`pgbouncer exited with ${child.exitCode}: ${child.output()}`);
        return acceptsTcp(port);
      },
      START_TIMEOUT_MS,
      `pgbouncer on :${port}`,
    );
  } catch (error) {
    await child.stop();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    port,
    urlFor(databaseUrl) {
      const url = new URL(databaseUrl);
      url.hostname = "127.0.0.1";
      url.port = String(port);
      return url.toString();
    },
    output: () => child.output(),
    async stop() {
      await child.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function writeConfig(dir: string, ini: string, upstream: URL, port: number, poolSize: number): void {
  const users = join(dir, "users.txt");
  // trust: the client's password is not checked; the file gives the one PgBouncer sends upstream.
  const user = decodeURIComponent(upstream.username || "postgres");
  writeFileSync(users, `"${user}" "${decodeURIComponent(upstream.password)}"\n`, { mode: 0o600 });
  const host = upstream.hostname.replace(/^\[|\]$/g, "");
  const lines = [
    "[databases]",
    `* = host=${host} port=${upstream.port || "5432"}`,
    "[pgbouncer]",
    "listen_addr = 127.0.0.1",
    `listen_port = ${port}`,
    // No Unix socket: one in /tmp would clash with another PgBouncer's on the same port.
    "unix_socket_dir =",
    "auth_type = trust",
    `auth_file = ${users}`,
    "pool_mode = transaction",
    `default_pool_size = ${poolSize}`,
    `max_client_conn = ${MAX_CLIENT_CONNECTIONS}`,
  ];
  writeFileSync(ini, `${lines.join("\n")}\n`);
}

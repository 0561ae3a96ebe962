// A Postgres of our own, for chaos scenarios that crash the database server: the embedded
// Postgres of `bun run dev` (dev/embedded-postgres.ts) with a cluster in a new temp folder and
// a port of its own, so the machine's server stays up for everyone else. It can be stopped in
// immediate mode (a crash as far as the data is concerned: no checkpoint, WAL replay at the
// next start) and started again on the same port and data directory, the way a database
// server restarted under its clients looks to them.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "../dev/embedded-postgres.ts";
import { freePort } from "../dev/ports.ts";
import { alive } from "../dev/start-lock.ts";
import { acceptsTcp } from "./processes.ts";
import { waitUntil } from "./wait.ts";

// The postmaster and its backends exit within milliseconds of SIGQUIT; a loaded machine gets margin.
const STOP_TIMEOUT_MS = 15_000;
// The folder's owner is root when the tests run as root; Postgres then runs as `postgres`,
// which must traverse it to reach the cluster inside.
const TRAVERSABLE_BY_ALL = 0o711;

export interface PrivatePostgres {
  /** The superuser's URL on the `postgres` database, for CREATE DATABASE. */
  readonly url: string;
  readonly port: number;
  /** Whether the server is up (started and not stopped since). */
  readonly running: boolean;
  /**
   * Immediate shutdown: what `pg_ctl stop -m immediate` does (SIGQUIT to the postmaster).
   * Every backend exits at once, no checkpoint is written, clients see their connections cut
   * and then refused. Resolves once the postmaster is gone and the port is free.
   */
  stopImmediately(): Promise<void>;
  /** Starts it again on the same port and data directory; resolves once it accepts connections (after its crash recovery). */
  start(): Promise<void>;
  /** Fast shutdown if it runs, then the cluster's folder is removed. */
  remove(): Promise<void>;
}

/** A new cluster (initdb: a few seconds) in a temp folder, started on a free port. */
export async function privatePostgres(log: (line: string) => void = () => {}): Promise<PrivatePostgres> {
  const home = mkdtempSync(join(tmpdir(), "testkit-postgres-"));
  chmodSync(home, TRAVERSABLE_BY_ALL);
  const requested = join(home, "cluster");
  const port = await freePort();
  const boot = (): Promise<EmbeddedPostgres> => startEmbeddedPostgres({ dataDir: requested, detached: false, log, port });
  let server: EmbeddedPostgres | undefined = await boot();
  // As root in a private checkout the cluster lives in the embedded Postgres's cache folder
  // instead (dev/pg-place.ts), in a folder of its own keyed by `home`.
  const placed = server.cache ? dirname(server.dataDir) : home;
  return {
    url: server.url,
    port,
    get running() {
      return server !== undefined;
    },
    async stopImmediately() {
      const pid = server?.pid;
      if (pid === undefined) return;
      server = undefined;
      try {
        process.kill(pid, "SIGQUIT");
      } catch {
        // already gone
      }
      await waitUntil(async () => !alive(pid) && !(await acceptsTcp(port)), STOP_TIMEOUT_MS, `the postmaster ${pid} to exit`, 20);
    },
    async start() {
      if (server) return;
      server = await boot();
    },
    async remove() {
      await server?.stop();
      server = undefined;
      rmSync(placed, { recursive: true, force: true });
      if (placed !== home) rmSync(home, { recursive: true, force: true });
    },
  };
}

// A primary and its hot standby of our own, for the failover scenario (chaos/12): two clusters
// in a temp folder on free loopback ports, the standby made with `pg_basebackup -R` (a
// replication slot, WAL streamed), synchronous or asynchronous as asked. The primary can be
// crashed (`pg_ctl stop -m immediate`) and the standby promoted (`pg_ctl promote`). The standby
// replicates through a link in this process, which can hold back what the primary sends: the
// standby then falls behind on purpose, and what was held is lost with the primary, as over a
// network that failed with it. Unlike private-postgres.ts this needs a Postgres installation
// (the embedded package has no pg_basebackup). A watchdog stops each postmaster if this
// process dies without remove().
import { execFile } from "node:child_process";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import postgres from "postgres";
import { freePort } from "../dev/ports.ts";
import { unprivilegedUser, type RunAs } from "../dev/pg-user.ts";
import { alive } from "../dev/start-lock.ts";
import { stopWhenUnused } from "../dev/watchdog.ts";
import { acceptsTcp } from "./processes.ts";
import { waitUntil } from "./wait.ts";

const run = promisify(execFile);

// initdb, a base backup and two starts: seconds, and tens of them on a loaded 2-core machine.
const PG_CTL_TIMEOUT_S = 60;
// The standby connects, catches up and is named synchronous within a second or two.
const STREAMING_TIMEOUT_MS = 30_000;
// SIGQUIT ends the postmaster and its backends within milliseconds.
const STOP_TIMEOUT_MS = 15_000;
const STANDBY_NAME = "standby";
const TRAVERSABLE_BY_ALL = 0o711;
const OWNER_ONLY = 0o700;
const SUPERUSER = "postgres";
const WAL_RETRY_MS = 100;
const PROGRAMS = ["initdb", "pg_ctl", "pg_basebackup", "postgres"];

export interface PairServer {
  readonly port: number;
  /** The superuser's URL on its `postgres` database, this server alone. */
  readonly url: string;
}

export interface PostgresPair {
  readonly primary: PairServer;
  readonly standby: PairServer;
  /** A libpq list URL on `database`: the primary first, then the standby (or the other way). */
  listUrl(database: string, options?: { readonly attrs?: string; readonly standbyFirst?: boolean }): string;
  /** The primary's view of its standby: `sync` or `async` once it streams (pg_stat_replication). */
  syncState(): Promise<string | undefined>;
  /** The link holds back everything the primary sends from now on: the standby falls behind. */
  holdReplication(): void;
  /** `pg_ctl stop -m immediate` on the primary; resolves once the postmaster is gone and its port free. */
  crashPrimary(): Promise<void>;
  /** The link cut (what it held is lost), then `pg_ctl promote -w`; resolves once it accepts writes. */
  promoteStandby(): Promise<void>;
  /** Both stopped, their logs handed to `log`, the folder removed. */
  remove(): Promise<void>;
}

export interface PairOptions {
  /** synchronous_standby_names names the standby: a commit waits until the standby has it. */
  readonly synchronous: boolean;
  readonly log?: (line: string) => void;
}

function programCandidates(): string[] {
  const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a)) : [];
  return [...versions.map((v) => `/usr/lib/postgresql/${v}/bin`), "/usr/local/pgsql/bin"];
}

/** Whether the server programs a pair needs are installed (the embedded Postgres has no pg_basebackup). */
export function serverProgramsInstalled(): boolean {
  return programCandidates().some((dir) => PROGRAMS.every((p) => existsSync(join(dir, p))));
}

/** The directory holding the server programs, or a one-line error saying none was found. */
export function serverPrograms(): string {
  const candidates = programCandidates();
  const found = candidates.find((dir) => PROGRAMS.every((p) => existsSync(join(dir, p))));
  if (!found) throw new Error(`a primary and standby pair needs Postgres's ${PROGRAMS.join(", ")}: none found in ${candidates.join(", ")} (apt-get install postgresql)`);
  return found;
}

export async function postgresPair(options: PairOptions): Promise<PostgresPair> {
  const log = options.log ?? (() => {});
  const bin = serverPrograms();
  const runAs = unprivilegedUser(log);
  const home = mkdtempSync(join(tmpdir(), "testkit-postgres-pair-"));
  chmodSync(home, TRAVERSABLE_BY_ALL);
  const dirs = { primary: ownDir(home, "primary", runAs), standby: ownDir(home, "standby", runAs), logs: ownDir(home, "logs", runAs) };
  const pgLog = (name: string): string => join(dirs.logs, `${name}.log`);
  const tool = (name: string, args: string[]): Promise<unknown> =>
    run(join(bin, name), args, { cwd: home, ...ids(runAs) }).catch((error: { stderr?: string; message?: string }) => {
      const why = (error.stderr || error.message || "").trim().split("\n").slice(-1)[0];
      throw new Error(`${name} failed: ${why}`);
    });
  const ports = { primary: await freePort(), standby: await freePort() };
  const link = await replicationLink(ports.primary);
  const started = new Set<"primary" | "standby">();
  const start = async (name: "primary" | "standby"): Promise<void> => {
    await tool("pg_ctl", ["-D", dirs[name], "-l", pgLog(name), "-w", "-t", String(PG_CTL_TIMEOUT_S), "start"]);
    started.add(name);
    stopWhenUnused(process.pid, postmasterPid(dirs[name]), join(home, "no-sharers"));
  };
  const remove = async (): Promise<void> => {
    for (const name of started) await tool("pg_ctl", ["-D", dirs[name], "-m", "immediate", "-w", "stop"]).catch(() => {});
    for (const name of ["primary", "standby"]) {
      if (existsSync(pgLog(name))) for (const line of readFileSync(pgLog(name), "utf8").split("\n")) if (line) log(`${name}: ${line}`);
    }
    rmSync(home, { recursive: true, force: true });
    link.cut();
  };
  try {
    await tool("initdb", ["-D", dirs.primary, "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]);
    settings(dirs.primary, ports.primary, options.synchronous ? `'${STANDBY_NAME}'` : "''");
    await start("primary");
    // Through the link: -R writes its port into the standby's primary_conninfo.
    await tool("pg_basebackup", ["-h", "127.0.0.1", "-p", String(link.port), "-U", SUPERUSER, "-D", dirs.standby,
      "-R", "-X", "stream", "-C", "-S", STANDBY_NAME, "--checkpoint=fast", "--no-sync"]);
    // Its own port and name; and no synchronous standby of its own to wait for once promoted.
    settings(dirs.standby, ports.standby, "''", STANDBY_NAME);
    // A promotion waits this long for WAL that will not come (5 s by default) before it ends recovery.
    appendFileSync(join(dirs.standby, "postgresql.conf"), `wal_retrieve_retry_interval = ${WAL_RETRY_MS}ms\n`);
    await start("standby");
  } catch (error) {
    await remove();
    throw error;
  }
  return handle({ ports, dirs, tool, remove, link, synchronous: options.synchronous });
}

interface Parts {
  readonly ports: { readonly primary: number; readonly standby: number };
  readonly dirs: { readonly primary: string; readonly standby: string };
  readonly tool: (name: string, args: string[]) => Promise<unknown>;
  readonly remove: () => Promise<void>;
  readonly link: ReplicationLink;
  readonly synchronous: boolean;
}

async function handle(parts: Parts): Promise<PostgresPair> {
  const { ports, dirs, tool } = parts;
  const url = (port: number): string => `postgres://${SUPERUSER}@127.0.0.1:${port}/postgres`;
  const one = async <T>(port: number, query: (sql: postgres.Sql) => Promise<T>): Promise<T> => {
    const sql = postgres(url(port), { max: 1, onnotice: () => {}, connect_timeout: 5 });
    try {
      return await query(sql);
    } finally {
      await sql.end({ timeout: 1 }).catch(() => {});
    }
  };
  const pair: PostgresPair = {
    primary: { port: ports.primary, url: url(ports.primary) },
    standby: { port: ports.standby, url: url(ports.standby) },
    listUrl(database, { attrs = "read-write", standbyFirst = false } = {}) {
      const hosts = (standbyFirst ? [ports.standby, ports.primary] : [ports.primary, ports.standby]).map((p) => `127.0.0.1:${p}`);
      return `postgres://${SUPERUSER}@${hosts.join(",")}/${database}?target_session_attrs=${attrs}`;
    },
    syncState: () => one(ports.primary, async (sql) =>
      (await sql<{ sync_state: string }[]>`select sync_state from pg_stat_replication where application_name = ${STANDBY_NAME}`)[0]?.sync_state),
    holdReplication: () => parts.link.hold(),
    async crashPrimary() {
      const pid = postmasterPid(dirs.primary);
      await tool("pg_ctl", ["-D", dirs.primary, "-m", "immediate", "-w", "stop"]);
      await waitUntil(async () => !alive(pid) && !(await acceptsTcp(ports.primary)), STOP_TIMEOUT_MS, "the primary to be gone", 20);
    },
    async promoteStandby() {
      parts.link.cut();
      await tool("pg_ctl", ["-D", dirs.standby, "-w", "-t", String(PG_CTL_TIMEOUT_S), "promote"]);
    },
    remove: parts.remove,
  };
  const wanted = parts.synchronous ? "sync" : "async";
  await waitUntil(async () => (await pair.syncState()) === wanted, STREAMING_TIMEOUT_MS, `the standby to stream (${wanted})`, 50);
  return pair;
}

interface ReplicationLink {
  readonly port: number;
  /** Nothing more from the primary reaches the standby; the standby's own messages still go. */
  hold(): void;
  /** Every connection closed, what was held dropped, no new connection. */
  cut(): void;
}

/** A TCP forwarder from a port of its own to the primary's. */
async function replicationLink(primaryPort: number): Promise<ReplicationLink> {
  const upstreams = new Set<Socket>();
  const sockets = new Set<Socket>();
  let held = false;
  const server = createServer((standby) => {
    const primary = connect(primaryPort, "127.0.0.1");
    for (const s of [standby, primary]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => (sockets.delete(s), upstreams.delete(s)));
    }
    upstreams.add(primary);
    if (held) primary.pause();
    // pipe() holds a side back while the other is full; a paused primary side is read no more,
    // so what it sends stays in the kernel's buffers and goes with the socket.
    standby.pipe(primary);
    primary.pipe(standby);
    standby.on("close", () => primary.destroy());
    primary.on("close", () => standby.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    hold() {
      held = true;
      for (const primary of upstreams) {
        primary.unpipe();
        primary.pause();
      }
    },
    cut() {
      server.close();
      for (const s of sockets) s.destroy();
    },
  };
}

/** A folder for the server's user (a cluster or its logs), when it is not us. */
function ownDir(home: string, name: string, runAs: RunAs | undefined): string {
  const dir = join(home, name);
  mkdirSync(dir, { mode: OWNER_ONLY });
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  return dir;
}

/** Loopback only, no Unix socket, room for every process's pool, and the replication roles. */
function settings(dataDir: string, port: number, synchronousNames: string, clusterName?: string): void {
  const lines = [
    "listen_addresses = '127.0.0.1'",
    "unix_socket_directories = ''",
    `port = ${port}`,
    "max_connections = 200",
    `synchronous_standby_names = ${synchronousNames}`,
    // The faults here crash processes, not the machine: what reached the kernel survives them.
    "fsync = off",
    ...(clusterName ? [`cluster_name = '${clusterName}'`] : []),
  ];
  appendFileSync(join(dataDir, "postgresql.conf"), `\n${lines.join("\n")}\n`);
}

function postmasterPid(dataDir: string): number {
  return Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
}

const ids = (runAs: RunAs | undefined): { uid?: number; gid?: number } => (runAs ? { uid: runAs.uid, gid: runAs.gid } : {});

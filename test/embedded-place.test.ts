// Where the embedded Postgres runs from when its user cannot reach the project: the
// reachability check read from owners and mode bits, the cache folder's ownership rules,
// and the lock that keeps two runs from starting one cluster twice. The whole path (a clone
// in a 0700 directory, as root) runs in test/private-dir-smoke.ts.
import { afterAll, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CACHE_NAME, cachedDataDir, cacheFolder, dataDirReachable, EmbeddedPostgresError, permits, pruneGone, traversable } from "../dev/pg-place.ts";
import type { RunAs } from "../dev/pg-user.ts";
import { LockTimeoutError, withLock } from "../dev/start-lock.ts";

const EXECUTE = 1;
const myUid = process.getuid!();
const myGid = process.getgid!();
// Open to all, like /tmp itself: each test closes the directories it means to.
const scratch = mkdtempSync(join(tmpdir(), "embedded-place-"));
chmodSync(scratch, 0o755);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A user who owns nothing here and is in none of its groups. */
const stranger: RunAs = { name: "stranger", uid: myUid + 4242, gid: myGid + 4242, groups: [myGid + 4242] };
/** Another user who shares this process's group. */
const groupMate: RunAs = { name: "mate", uid: myUid + 4243, gid: myGid + 4243, groups: [myGid + 4243, myGid] };
/** This process's own user. */
const me: RunAs = { name: "me", uid: myUid, gid: myGid, groups: [myGid] };

function dir(name: string, mode: number): string {
  const path = join(scratch, name);
  mkdirSync(path, { recursive: true });
  chmodSync(path, mode);
  return path;
}

test("the owner's bits decide for the owner, the group's for a member, the others' for the rest", () => {
  const groupOnly = dir("group-only", 0o070);
  expect(permits(groupOnly, me, EXECUTE)).toBe(false);
  expect(permits(groupOnly, groupMate, EXECUTE)).toBe(true);
  expect(permits(groupOnly, stranger, EXECUTE)).toBe(false);
  const othersOnly = dir("others-only", 0o001);
  expect(permits(othersOnly, me, EXECUTE)).toBe(false);
  expect(permits(othersOnly, groupMate, EXECUTE)).toBe(false);
  expect(permits(othersOnly, stranger, EXECUTE)).toBe(true);
});

test("a directory below a 0700 one is out of a stranger's reach; 0711 lets them through", () => {
  const privateDir = dir("private", 0o700);
  const project = dir("private/project", 0o755);
  expect(traversable(project, stranger)).toBe(false);
  expect(traversable(project, me)).toBe(true);
  chmodSync(privateDir, 0o711);
  expect(traversable(project, stranger)).toBe(true);
  chmodSync(privateDir, 0o700);
});

test("a symlink from an open directory into a private one does not make the target reachable", () => {
  const target = dir("locked/target", 0o755);
  chmodSync(join(scratch, "locked"), 0o700);
  const link = join(dir("open", 0o755), "link");
  symlinkSync(target, link);
  expect(traversable(join(scratch, "open"), stranger)).toBe(true);
  expect(traversable(link, stranger)).toBe(false);
});

test("a data directory is judged by the directories above its parent, which need not exist yet", () => {
  const project = dir("clone/p", 0o755);
  chmodSync(join(scratch, "clone"), 0o700);
  const dataDir = join(project, ".data", "postgres");
  expect(existsSync(join(project, ".data"))).toBe(false);
  expect(dataDirReachable(dataDir, stranger)).toBe(false);
  chmodSync(join(scratch, "clone"), 0o755);
  expect(dataDirReachable(dataDir, stranger)).toBe(true);
  // The parent itself (.data) is made traversable when the cluster is created, so its mode does not count.
  dir("clone/p/.data", 0o700);
  expect(dataDirReachable(dataDir, stranger)).toBe(true);
});

test("the cache folder is created for its user with mode 0700, and a looser mode is tightened", () => {
  const parent = dir("tmp-a", 0o1777);
  const folder = cacheFolder(me, parent);
  expect(folder).toBe(join(parent, CACHE_NAME));
  expect(statSync(folder).mode & 0o777).toBe(0o700);
  expect(statSync(folder).uid).toBe(myUid);
  chmodSync(folder, 0o755);
  expect(cacheFolder(me, parent)).toBe(folder);
  expect(statSync(folder).mode & 0o777).toBe(0o700);
});

test("a cache folder someone else owns, or a file in its place, is refused with its path", () => {
  const parent = dir("tmp-b", 0o1777);
  mkdirSync(join(parent, CACHE_NAME), { mode: 0o700 });
  expect(() => cacheFolder(stranger, parent)).toThrow(EmbeddedPostgresError);
  expect(() => cacheFolder(stranger, parent)).toThrow(`${join(parent, CACHE_NAME)} is not a directory owned by the user "stranger"`);
  const other = dir("tmp-c", 0o1777);
  writeFileSync(join(other, CACHE_NAME), "");
  expect(() => cacheFolder(me, other)).toThrow("is not a directory owned by");
});

test("a temp dir the user cannot reach either stops with a line naming TMPDIR", () => {
  const parent = dir("tmp-d/inner", 0o1777);
  chmodSync(join(scratch, "tmp-d"), 0o700);
  expect(() => cacheFolder(stranger, parent)).toThrow("set TMPDIR to a directory it can traverse, or set DATABASE_URL");
});

test("a start lock held by another live process is waited for, then taken once that process lets go", async () => {
  const lock = join(scratch, "held.lock");
  const holder = Bun.spawn(
    [process.execPath, "-e", `
      import { withLock } from ${JSON.stringify(join(import.meta.dir, "../dev/start-lock.ts"))};
      await withLock(${JSON.stringify(lock)}, 1000, async () => {
        console.log("held");
        for await (const _ of process.stdin) {} // until the test closes stdin
      });`],
    { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
  );
  const reader = holder.stdout.getReader();
  expect(new TextDecoder().decode((await reader.read()).value)).toBe("held\n");
  const waited = await withLock(lock, 300, async () => "ran").catch((error: unknown) => error);
  expect(waited).toBeInstanceOf(LockTimeoutError);
  expect(String(waited)).toContain(`process ${holder.pid} has held ${lock}`);
  holder.stdin.end();
  expect(await holder.exited).toBe(0);
  expect(await withLock(lock, 5000, async () => "ran")).toBe("ran");
  expect(existsSync(lock)).toBe(false);
});

test("a lock left by a process that is gone is taken over at once; a live holder's is not", async () => {
  const lock = join(scratch, "stale.lock");
  const gone = spawnSync("sh", ["-c", "echo $$"], { encoding: "utf8" });
  writeFileSync(lock, gone.stdout.trim());
  expect(await withLock(lock, 0, async () => "ran")).toBe("ran");
  writeFileSync(lock, "1"); // pid 1 lives as long as the machine does
  expect(await withLock(lock, 0, async () => "ran").catch((error: unknown) => error)).toBeInstanceOf(LockTimeoutError);
  rmSync(lock);
});

test("the cache keeps the folders of checkouts that exist or whose Postgres runs, and removes the rest", () => {
  const cache = dir("prune-cache", 0o700);
  const checkout = dir("prune-checkout/.data", 0o755);
  const home = (key: string, origin: string, postmasterPid?: number): string => {
    const path = join(cache, key);
    mkdirSync(join(path, "postgres"), { recursive: true });
    writeFileSync(join(path, "origin"), `${origin}\n`);
    if (postmasterPid !== undefined) writeFileSync(join(path, "postgres", "postmaster.pid"), `${postmasterPid}\n${path}\n`);
    return path;
  };
  const existing = home("a1", checkout);
  const goneAndRunning = home("b2", join(scratch, "deleted-clone-1/.data"), process.pid);
  const goneAndStopped = home("c3", join(scratch, "deleted-clone-2/.data"));
  // A pid no process has: a server that was SIGKILLed with its clone.
  const goneStalePid = home("d4", join(scratch, "deleted-clone-3/.data"), 2 ** 22 + 12345);
  const binaries = dir("prune-cache/linux-x64-18.0.0/bin", 0o755);

  expect(pruneGone(cache).sort()).toEqual([goneAndStopped, goneStalePid].sort());
  for (const kept of [existing, goneAndRunning, binaries]) expect(existsSync(kept)).toBe(true);
  for (const gone of [goneAndStopped, goneStalePid]) expect(existsSync(gone)).toBe(false);
});

test("a checkout's folder in the cache is kept from the moment it is placed, before its .data exists", () => {
  const cache = dir("place-cache", 0o700);
  // A fresh clone: nothing has created .data in it, the cluster is to live in the cache.
  const clone = dir("fresh-clone", 0o755);
  const placed = cachedDataDir(join(clone, ".data", "test-postgres"), cache, me);
  // Another run starting now (initdb has not written postmaster.pid yet) prunes the cache.
  mkdirSync(`${placed}.initdb`, { recursive: true });
  expect(pruneGone(cache)).toEqual([]);
  expect(existsSync(`${placed}.initdb`)).toBe(true);
  // Once the clone is deleted, its folder goes.
  rmSync(clone, { recursive: true, force: true });
  expect(pruneGone(cache)).toHaveLength(1);
});

// A lock file naming its holder's pid, for the steps two runs started together must not
// interleave: two `bun test` runs would otherwise both run initdb into the same staging
// directory or both spawn a postmaster, and two first runs from a private directory would
// both copy the binaries. A lock whose holder is gone (SIGKILL) is taken over.
import { linkSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";

const POLL_MS = 100;

export class LockTimeoutError extends Error {
  override name = "LockTimeoutError";
}

/** Runs `work` holding `file`; waits up to `timeoutMs` for a live holder to let go. */
export async function withLock<T>(file: string, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  await acquire(file, timeoutMs);
  try {
    return await work();
  } finally {
    if (holderOf(file) === process.pid) rmSync(file, { force: true });
  }
}

async function acquire(file: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (tryCreate(file)) return;
    const holder = holderOf(file);
    if (holder === undefined || !alive(holder)) {
      // Re-read right before removing, so a lock another waiter has just taken over stays.
      if (holderOf(file) === holder) rmSync(file, { force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new LockTimeoutError(`process ${holder} has held ${file} for over ${timeoutMs / 1000} s; stop it or remove the file`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** link(2) publishes a file that already holds our pid, atomically, or fails with EEXIST. */
function tryCreate(file: string): boolean {
  const mine = `${file}.${process.pid}`;
  writeFileSync(mine, String(process.pid));
  try {
    linkSync(mine, file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    unlinkSync(mine);
  }
}

function holderOf(file: string): number | undefined {
  try {
    return Number.parseInt(readFileSync(file, "utf8"), 10) || undefined;
  } catch {
    return undefined;
  }
}

/** True while `pid` runs (EPERM: it runs under another user). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

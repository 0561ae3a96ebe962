// Stops the embedded Postgres when the process that owns it is gone, however it went:
// `bun test` fires no exit event, and a SIGKILLed `bun run dev` runs no handler at all.
// A detached shell polls both pids; Postgres outlives its owner by at most one poll.
import { spawn } from "node:child_process";

const POLL_S = 0.5;

export function stopWhenOwnerDies(ownerPid: number, postgresPid: number): void {
  if (process.platform === "win32") return;
  // SIGINT = Postgres's fast shutdown. Ends on its own when Postgres stops first.
  const script =
    `while kill -0 ${ownerPid} 2>/dev/null && kill -0 ${postgresPid} 2>/dev/null; do sleep ${POLL_S}; done; ` +
    `kill -0 ${ownerPid} 2>/dev/null || kill -INT ${postgresPid} 2>/dev/null; exit 0`;
  const watcher = spawn("sh", ["-c", script], { detached: true, stdio: "ignore" });
  watcher.on("error", () => {}); // no sh: the exit hooks remain
  watcher.unref();
}

// Stops the embedded Postgres when the processes using it are gone, however they went:
// `bun test` fires no exit event, and a SIGKILLed `bun run dev` runs no handler at all.
// A detached shell polls the owner's pid and those of the runs sharing the server (one per
// line in `sharersFile`, read afresh each poll); Postgres outlives the last by at most one poll.
import { spawn } from "node:child_process";

const POLL_S = 0.5;

export function stopWhenUnused(ownerPid: number, postgresPid: number, sharersFile: string): void {
  if (process.platform === "win32") return;
  // SIGINT = Postgres's fast shutdown. Ends on its own when Postgres stops first.
  const script =
    `used() { for p in ${ownerPid} $(cat "$1" 2>/dev/null); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }; ` +
    `while kill -0 ${postgresPid} 2>/dev/null && used "$1"; do sleep ${POLL_S}; done; ` +
    `used "$1" || kill -INT ${postgresPid} 2>/dev/null; exit 0`;
  const watcher = spawn("sh", ["-c", script, "watchdog", sharersFile], { detached: true, stdio: "ignore" });
  watcher.on("error", () => {}); // no sh: the exit hooks remain
  watcher.unref();
}

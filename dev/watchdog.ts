// What a SIGKILLed `bun run dev` (or a `bun test` that fires no exit event) leaves behind is
// stopped by a detached shell that polls pids: it runs no handler of ours, so it survives
// whatever ended its owner.
//  - stopWhenUnused: the embedded Postgres, once its owner and the runs sharing the server
//    (one pid per line in `sharersFile`, read afresh each poll) are gone;
//  - stopWithSupervisor: the supervisor's children (api, relay, subscriber), each in its own
//    process group so that a terminal's Ctrl-C reaches only the supervisor, once it is gone.
// Each outlives its owner by at most one poll.
import { spawn } from "node:child_process";

const POLL_S = 0.5;

/** A detached `sh -c script` that nothing waits for; without sh the exit hooks remain. */
function watch(script: string, args: readonly string[] = []): void {
  if (process.platform === "win32") return;
  const watcher = spawn("sh", ["-c", script, "watchdog", ...args], { detached: true, stdio: "ignore" });
  watcher.on("error", () => {});
  watcher.unref();
}

export function stopWhenUnused(ownerPid: number, postgresPid: number, sharersFile: string): void {
  // SIGINT = Postgres's fast shutdown. Ends on its own when Postgres stops first.
  const script =
    `used() { for p in ${ownerPid} $(cat "$1" 2>/dev/null); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }; ` +
    `while kill -0 ${postgresPid} 2>/dev/null && used "$1"; do sleep ${POLL_S}; done; ` +
    `used "$1" || kill -INT ${postgresPid} 2>/dev/null; exit 0`;
  watch(script, [sharersFile]);
}

/**
 * SIGTERM to the process group of each of `childPids` once `supervisorPid` is gone (they then
 * stop as on Ctrl-C: requests and batches in flight finish). Ends on its own when the children
 * have all exited first.
 */
export function stopWithSupervisor(supervisorPid: number, childPids: readonly number[]): void {
  const pids = childPids.join(" ");
  const script =
    `alive() { for p in ${pids}; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }; ` +
    `while kill -0 ${supervisorPid} 2>/dev/null && alive; do sleep ${POLL_S}; done; ` +
    `kill -0 ${supervisorPid} 2>/dev/null || for p in ${pids}; do kill -TERM -"$p" 2>/dev/null; done; exit 0`;
  watch(script);
}

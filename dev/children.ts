// The processes `bun run dev` supervises: each in its own process group, so a terminal's
// Ctrl-C reaches only the supervisor, which then stops them in order (api, relay and
// subscriber first, the databases they use last) with exactly one SIGTERM each.
import { spawn, type ChildProcess } from "node:child_process";

// A child that has not exited this long after SIGTERM is killed.
const STOP_TIMEOUT_MS = 10_000;

export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  /** Resolves with the exit code (or the signal's name) when the child ends. */
  readonly exited: Promise<number | string>;
}

export type Print = (name: string, line: string) => void;

export function startChild(name: string, args: string[], env: NodeJS.ProcessEnv, print: Print): Child {
  const child = spawn(process.execPath, args, { env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | string>((resolve) => {
    child.once("exit", (code, signal) => resolve(code ?? signal ?? "unknown"));
    child.once("error", (error) => resolve(error.message));
  });
  forwardLines(child, (line) => print(name, line));
  return { name, process: child, exited };
}

function forwardLines(child: ChildProcess, emit: (line: string) => void): void {
  for (const stream of [child.stdout, child.stderr]) {
    let pending = "";
    stream?.on("data", (chunk: Buffer) => {
      const lines = (pending + chunk.toString("utf8")).split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) if (line.trim()) emit(line);
    });
    stream?.on("end", () => pending.trim() && emit(pending));
  }
}

const running = (child: Child): boolean => child.process.exitCode === null && child.process.signalCode === null;

/** SIGTERM to each, then waits; the ones still there after the timeout are SIGKILLed. */
export async function stopChildren(children: readonly Child[]): Promise<void> {
  for (const child of children) if (running(child)) child.process.kill("SIGTERM");
  const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), STOP_TIMEOUT_MS).unref());
  await Promise.race([Promise.all(children.map((child) => child.exited)), timeout]);
  for (const child of children) if (running(child)) child.process.kill("SIGKILL");
}

/** For an exit hook: no waiting possible, so kill what is left. */
export function killChildrenNow(children: readonly Child[]): void {
  for (const child of children) if (running(child)) child.process.kill("SIGKILL");
}

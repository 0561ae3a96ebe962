// The one way the test kit runs a program: spawned with the project's root as cwd, its
// output kept (the tail, for an error message) or parsed line by line, waited for until it
// answers, stopped with SIGTERM then SIGKILL. Every child is registered so a chaos scenario
// or a benchmark can kill whatever it started, even after a failed check.
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { freePort } from "../dev/ports.ts";
import { waitUntil, within } from "./wait.ts";

export const ROOT = new URL("..", import.meta.url).pathname;

/** The application_name of the API's pool (lib/api/start.ts), as pg_stat_activity shows it. */
export const API_APP = "charges-api";
/** The application_name of the relay process's pool (relay.ts). */
export const RELAY_APP = "charges-relay";

// Enough of a child's output to say why it failed, not a log.
const TAIL_CHARS = 4000;
// A graceful stop that takes longer than this is finished with SIGKILL. The relay finishes
// the batch in hand first, which takes seconds on a loaded 2-core machine.
const STOP_TIMEOUT_MS = 15_000;
// Bun and api.ts/relay.ts start in well under a second; a loaded 2-core machine needs margin.
const READY_TIMEOUT_MS = 20_000;
// After the exit, the rest of its output is read for at most this long.
const OUTPUT_DRAIN_MS = 1000;

export interface SpawnOptions {
  /** Used in errors and in chaos's log file names. */
  readonly name?: string;
  /** Added to this process's environment. */
  readonly env?: Record<string, string | undefined>;
  readonly cwd?: string;
  /** "ignore" (default), "tail" (kept with stderr for errors), or a handler per line. */
  readonly stdout?: "ignore" | "tail" | ((line: string) => void);
  /** stderr to a file (chaos keeps them for a post-mortem) instead of the kept tail. */
  readonly stderrFile?: string;
  /** Its own process group, so kill() reaches whatever it starts too. */
  readonly processGroup?: boolean;
}

export interface Child {
  readonly name: string;
  readonly pid: number;
  readonly exited: boolean;
  readonly exitCode: number | null;
  /** Resolves with the exit code, once its output has been read. */
  readonly done: Promise<number>;
  /** The last few thousand characters of stderr (from its file too) and of stdout when "tail". */
  output(): string;
  kill(signal?: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL after `timeoutMs`; resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number>;
}

const running = new Set<Child>();

export function spawnChild(cmd: readonly string[], options: SpawnOptions = {}): Child {
  const name = options.name ?? cmd.join(" ");
  const stdoutMode = options.stdout ?? "ignore";
  const proc: Subprocess = Bun.spawn([...cmd], {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, ...options.env },
    stdin: "ignore",
    stdout: stdoutMode === "ignore" ? "ignore" : "pipe",
    stderr: options.stderrFile ? Bun.file(options.stderrFile) : "pipe",
    detached: options.processGroup ?? false,
  });
  let tail = "";
  const keep = (text: string): void => {
    tail = (tail + text).slice(-TAIL_CHARS);
  };
  // Always drained: a full pipe would stall the child.
  const reads: Promise<void>[] = [];
  if (proc.stderr instanceof ReadableStream) reads.push(readText(proc.stderr, keep));
  if (proc.stdout instanceof ReadableStream) {
    const onLine = stdoutMode;
    reads.push(readText(proc.stdout, typeof onLine === "function" ? splitLines(onLine) : keep));
  }
  let exited = false;
  // Resolves once its output has been read too (bounded: a grandchild may hold the pipe).
  const done = proc.exited.then(async (code) => {
    await within(Promise.all(reads), OUTPUT_DRAIN_MS);
    exited = true;
    running.delete(child);
    return code;
  });
  // A line handler that throws rejects `done`; whoever awaits it sees the error.
  done.catch(() => {});
  const child: Child = {
    name,
    pid: proc.pid,
    get exited() {
      return exited;
    },
    get exitCode() {
      return proc.exitCode;
    },
    done,
    output: () => (options.stderrFile ? `${fileTail(options.stderrFile)}\n${tail}` : tail).trim(),
    kill(signal = "SIGKILL") {
      if (exited) return;
      try {
        if (options.processGroup) process.kill(-proc.pid, signal);
        else proc.kill(signal);
      } catch {
        // Already gone.
      }
    },
    async stop(timeoutMs = STOP_TIMEOUT_MS) {
      child.kill("SIGTERM");
      if ((await within(done, timeoutMs)) === undefined) child.kill("SIGKILL");
      return done;
    },
  };
  running.add(child);
  return child;
}

/** `bun <script>` (or `deno run -A <script>`), from the project's root. */
export function spawnScript(script: string, options: SpawnOptions & { runtime?: "bun" | "deno" } = {}): Child {
  const cmd = options.runtime === "deno" ? ["deno", "run", "-A", script] : ["bun", script];
  return spawnChild(cmd, { name: script, ...options });
}

/** Waits until `url` answers 200; fails at once, with the child's output, if it exits first. */
export async function waitForHttp(child: Child, url: string, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
  await waitUntil(
    async () => {
      if (child.exited) throw new Error(`${child.name} exited with ${child.exitCode} before ${url} answered: ${child.output().slice(-500)}`);
      return fetch(url).then((r) => (void r.body?.cancel(), r.status === 200), () => false);
    },
    timeoutMs,
    `${child.name} to answer 200 on ${url}`,
    50,
  );
}

/** Whether something accepts TCP connections on the port. */
export async function acceptsTcp(port: number, hostname = "127.0.0.1"): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname, port, socket: { data() {} } });
    socket.end();
    return true;
  } catch {
    return false;
  }
}

export interface Service {
  readonly child: Child;
  readonly port: number;
  /** http://127.0.0.1:<port> */
  readonly base: string;
}

const PORT_VARIABLE = { api: "PORT", relay: "RELAY_PORT" } as const;

export interface EntrypointOptions extends SpawnOptions {
  readonly runtime?: "bun" | "deno";
  /** A port of its own (default: a free one). */
  readonly port?: number;
  /** The path that says it is up (default /readyz); false: do not wait. */
  readonly readyPath?: string | false;
  readonly timeoutMs?: number;
}

/** `api.ts` or `relay.ts` on a free port of its own, once it answers on its ready path. */
export async function startEntrypoint(entry: "api" | "relay", options: EntrypointOptions = {}): Promise<Service> {
  const port = options.port ?? (await freePort());
  const child = spawnScript(`${entry}.ts`, {
    name: entry,
    ...options,
    env: { ...options.env, [PORT_VARIABLE[entry]]: String(port) },
  });
  const base = `http://127.0.0.1:${port}`;
  const readyPath = options.readyPath ?? "/readyz";
  if (readyPath !== false) await waitForHttp(child, `${base}${readyPath}`, options.timeoutMs);
  return { child, port, base };
}

export interface Finished {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to its end and returns what it printed. */
export async function runToExit(cmd: readonly string[], env: Record<string, string | undefined> = {}): Promise<Finished> {
  const proc = Bun.spawn([...cmd], { cwd: ROOT, env: { ...process.env, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

/** SIGKILLs every child still running and waits (bounded) for them to go. */
export async function killAll(timeoutMs = 3000): Promise<void> {
  const list = [...running];
  for (const child of list) child.kill("SIGKILL");
  await within(Promise.all(list.map((c) => c.done)), timeoutMs);
}

function fileTail(path: string): string {
  try {
    return readFileSync(path, "utf8").slice(-TAIL_CHARS);
  } catch {
    return "";
  }
}

async function readText(stream: ReadableStream<Uint8Array>, onText: (text: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
    if (done) return;
    onText(decoder.decode(value, { stream: true }));
  }
}

function splitLines(onLine: (line: string) => void): (text: string) => void {
  let buffered = "";
  return (text) => {
    buffered += text;
    const lines = buffered.split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) if (line.trim()) onLine(line);
  };
}

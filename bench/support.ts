// Shared helpers for the benchmarks: fresh databases, child processes, ports, statistics.
import type { Subprocess } from "bun";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { freePort } from "../dev/ports.ts";

export const ADMIN_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
export const MQTT_URL = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
const ROOT = new URL("..", import.meta.url).pathname;

/** A tool the bench shells out to is missing: reported as one line naming the package. */
export class MissingTool extends Error {
  constructor(tool: string, pkg: string) {
    super(`${tool} not found on PATH: install it with \`apt-get install -y ${pkg}\` (Debian package ${pkg})`);
  }
}

export function requireTool(tool: string, pkg: string): string {
  const path = Bun.which(tool);
  if (!path) throw new MissingTool(tool, pkg);
  return path;
}

export type FreshDb = ScratchDatabase;

/** A new database on the server in DATABASE_URL, schema applied by lib/shared/db.ts migrate(). */
export function freshDatabase(label: string, max = 4): Promise<FreshDb> {
  return createScratchDatabase(ADMIN_URL, scratchName("bench", label), { max, applicationName: "bench" });
}


export interface Child {
  readonly proc: Subprocess;
  readonly port: number;
  stop(): Promise<void>;
}

/** `bun <entry>` with env; stdout discarded (as a production log shipper would consume it). */
export async function startChild(entry: string, env: Record<string, string>, readyPath: string, portVar: string): Promise<Child> {
  const port = await freePort();
  const proc = Bun.spawn(["bun", entry], {
    cwd: ROOT,
    env: { ...process.env, ...env, [portVar]: String(port) },
    stdout: "ignore",
    stderr: "pipe",
  });
  // Drain stderr (a full pipe would stall the child) and keep its tail for error messages.
  let tail = "";
  void (async () => {
    const decoder = new TextDecoder();
    const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      tail = (tail + decoder.decode(value)).slice(-1000);
    }
  })();
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (proc.exitCode !== null) {
      await Bun.sleep(50);
      throw new Error(`${entry} exited with ${proc.exitCode}: ${tail.trim().slice(-500)}`);
    }
    const ok = await fetch(`http://127.0.0.1:${port}${readyPath}`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`${entry} not ready on :${port} within 15 s`);
    await Bun.sleep(50);
  }
  return {
    proc,
    port,
    async stop() {
      proc.kill("SIGTERM");
      const exited = await Promise.race([proc.exited.then(() => true), Bun.sleep(8_000).then(() => false)]);
      if (!exited) proc.kill("SIGKILL");
    },
  };
}

export async function run(cmd: string[], env: Record<string, string> = {}): Promise<string> {
  const proc = Bun.spawn(cmd, { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  if (code !== 0) throw new Error(`${cmd[0]} exited with ${code}: ${err.trim().slice(0, 800)}`);
  return out;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] ?? Number.NaN;
}

export function median(values: readonly number[]): number {
  const s = [...values].filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export interface Latency {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly count: number;
}

export function latencyOf(samplesMs: readonly number[]): Latency {
  const s = [...samplesMs].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? Number.NaN, count: s.length };
}

export function log(message: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}`);
}

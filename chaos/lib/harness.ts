// Shared chaos harness: environment, a fresh database per scenario, free ports, the real
// processes (api.ts, relay.ts, examples/subscriber.ts) spawned in their own process groups,
// readiness waits, and a cleanup that kills everything it started even when a check throws.
import postgres from "postgres";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../dev/ports.ts";
import { backendWaitingOnLock, createScratchDatabase, holdKey, scratchName, type ScratchDatabase } from "../../testkit/database.ts";

export { freePort, holdKey };

export type Sql = postgres.Sql<Record<string, never>>;

export const ROOT = new URL("../..", import.meta.url).pathname;
export const DATABASE_URL = process.env.DATABASE_URL?.trim() || "postgres://postgres@127.0.0.1:5432/postgres";
export const MQTT_URL = process.env.MQTT_URL?.trim() || "mqtt://127.0.0.1:1883";
/** One directory per scenario run for the children's stderr, kept for a post-mortem. */
export const LOG_DIR = mkdtempSync(join(tmpdir(), "chaos-"));

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns a value other than undefined/false, or throws at the deadline. */
export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined | false> | T | undefined | false, everyMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}


export function connect(url: string, max = 4): Sql {
  return postgres(url, { max, onnotice: () => {}, connection: { application_name: "chaos-harness" } }) as unknown as Sql;
}

export type FreshDb = ScratchDatabase;

/** A new database on DATABASE_URL's server; the processes under test apply the schema. */
export function freshDatabase(label: string): Promise<FreshDb> {
  return createScratchDatabase(DATABASE_URL, scratchName("chaos", label), { migrate: false, applicationName: "chaos-harness" });
}

export interface Child {
  readonly name: string;
  readonly proc: Bun.Subprocess<"ignore", "pipe" | "ignore", Bun.BunFile>;
  readonly exited: boolean;
  kill(signal?: NodeJS.Signals): void;
}

const children = new Set<Child>();

/** Spawns `bun <script>` in its own process group; stderr goes to LOG_DIR/<name>-<time>.log. */
export function spawnBun(name: string, script: string, env: Record<string, string>, stdout: "pipe" | "ignore" = "ignore"): Child {
  return spawnCmd(name, ["bun", script], env, stdout);
}

/** Spawns any command in its own process group, registered for killAll(). */
export function spawnCmd(name: string, cmd: string[], env: Record<string, string>, stdout: "pipe" | "ignore" = "ignore"): Child {
  const proc = Bun.spawn(cmd, {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: "warn", ...env },
    stdin: "ignore",
    stdout,
    stderr: Bun.file(join(LOG_DIR, `${name}-${Date.now()}.log`)),
    detached: true,
  });
  let exited = false;
  void proc.exited.then(() => (exited = true));
  const child: Child = {
    name,
    proc,
    get exited() {
      return exited;
    },
    kill(signal = "SIGKILL") {
      if (exited) return;
      try {
        process.kill(-proc.pid, signal); // the whole process group
      } catch {
        try {
          proc.kill(signal);
        } catch {}
      }
    },
  };
  children.add(child);
  void proc.exited.then(() => children.delete(child));
  return child;
}

/** SIGKILLs every child still running and waits (bounded) for them to go. */
export async function killAll(): Promise<void> {
  const list = [...children];
  for (const c of list) c.kill("SIGKILL");
  await Promise.race([Promise.all(list.map((c) => c.proc.exited)), sleep(3000)]);
}

export async function waitReady(child: Child, port: number, timeoutMs = 20_000): Promise<void> {
  await until(`${child.name} /readyz on :${port}`, timeoutMs, async () => {
    if (child.exited) throw new Error(`${child.name} exited with ${child.proc.exitCode} before it was ready (logs in ${LOG_DIR})`);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/readyz`);
      return r.status === 200;
    } catch {
      return false;
    }
  }, 50);
}

export interface Api {
  readonly child: Child;
  readonly port: number;
  readonly base: string;
}

export async function startApi(dbUrl: string, prefix: string, port?: number): Promise<Api> {
  const p = port ?? (await freePort());
  const child = spawnBun("api", "api.ts", { DATABASE_URL: dbUrl, MQTT_URL, MQTT_TOPIC_PREFIX: prefix, PORT: String(p) });
  await waitReady(child, p);
  return { child, port: p, base: `http://127.0.0.1:${p}` };
}

export async function startRelay(dbUrl: string, prefix: string, mqttUrl = MQTT_URL, wait = true): Promise<Child> {
  const port = await freePort();
  const child = spawnBun("relay", "relay.ts", {
    DATABASE_URL: dbUrl,
    MQTT_URL: mqttUrl,
    MQTT_TOPIC_PREFIX: prefix,
    RELAY_PORT: String(port),
    OUTBOX_POLL_MS: "250",
  });
  if (wait) await waitReady(child, port);
  return child;
}

/** Kills the process and waits until it is gone. */
export async function hardKill(child: Child): Promise<void> {
  child.kill("SIGKILL");
  await Promise.race([child.proc.exited, sleep(3000)]);
}

/** Backend pids of the given application_name on this database. */
export async function backends(sql: Sql, appName: string): Promise<number[]> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity where datname = current_database() and application_name = ${appName}`;
  return rows.map((r) => r.pid);
}

/** True when a backend of `appName` is waiting on a heavyweight lock. */
export async function waitingOnLock(sql: Sql, appName: string): Promise<boolean> {
  return (await backendWaitingOnLock(sql, appName)) !== undefined;
}

export async function terminate(sql: Sql, pids: readonly number[]): Promise<void> {
  for (const pid of pids) await sql`select pg_terminate_backend(${pid})`;
}

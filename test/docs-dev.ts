// `bun run dev` as a newcomer starts it, for the tests that run what it prints and what the
// docs tell a user to paste: on free ports, against this machine's Postgres (a fresh database)
// and broker (a topic prefix and client id of its own), its banner parsed into the values a
// user copies (the API's URL, the token, the curls, the TypeScript snippet).
import { freePort } from "../dev/ports.ts";
import { freshDatabase, services, type TestDatabase } from "../testkit/services.ts";
import { spawnChild, type Child } from "../testkit/processes.ts";
import { waitUntil } from "../testkit/wait.ts";

// Embedded broker and Postgres are skipped (DATABASE_URL, MQTT_URL given); api, relay and the
// subscriber migrate and connect in seconds, more on a loaded machine.
const DEV_READY_TIMEOUT_MS = 60_000;
const DEV_STOP_TIMEOUT_MS = 20_000;

export interface DevRun {
  readonly api: string;
  readonly relay: string;
  /** The bearer token the banner's curl carries, if it carries one. */
  readonly token: string | undefined;
  /** The banner's lines, without the `dev |` prefix. */
  readonly banner: readonly string[];
  /** Every line dev mode printed so far, prefixes kept. */
  readonly lines: readonly string[];
  readonly db: TestDatabase;
  /** The environment dev mode was started with. */
  readonly env: Readonly<Record<string, string>>;
  stop(): Promise<number>;
}

const READY = "ready: api, relay and subscriber are running";
// The banner's last line: once it is in, the whole banner is.
const LAST_LINE = "console.log(authorized.charge.status";

/** Starts `bun run dev` with `env` added (e.g. AUTH_MODE=none) and waits for its banner. */
export async function startDev(label: string, env: Record<string, string> = {}): Promise<DevRun> {
  const db = await freshDatabase(`docs_${label}`);
  const [apiPort, relayPort] = [await freePort(), await freePort()];
  const runEnv = {
    DATABASE_URL: db.url,
    MQTT_URL: (await services()).mqttUrl,
    MQTT_TOPIC_PREFIX: `docs-${label}-${process.pid}/`,
    SUBSCRIBER_CLIENT_ID: `docs-${label}-${process.pid}`,
    PORT: String(apiPort),
    RELAY_PORT: String(relayPort),
    NO_COLOR: "1",
    ...env,
  };
  const lines: string[] = [];
  const child: Child = spawnChild(["bun", "run", "dev"], { name: `bun run dev (${label})`, env: runEnv, stdout: (line) => lines.push(line), processGroup: true });
  await waitUntil(
    () => {
      if (child.exited) throw new Error(`bun run dev (${label}) exited ${child.exitCode} before its banner:\n${lines.join("\n")}\n${child.output()}`);
      return lines.some((line) => line.includes(LAST_LINE));
    },
    DEV_READY_TIMEOUT_MS,
    `bun run dev (${label}) to print its banner`,
  ).catch((error: unknown) => {
    child.kill("SIGKILL");
    throw error;
  });
  const from = lines.findIndex((line) => line.includes(READY));
  const banner = lines.slice(from).filter((line) => line.startsWith("dev ")).map((line) => line.replace(/^dev\s+\| /, ""));
  const token = banner.join("\n").match(/Authorization: Bearer ([A-Za-z0-9._-]+)'/)?.[1];
  return {
    api: `http://127.0.0.1:${apiPort}`,
    relay: `http://127.0.0.1:${relayPort}`,
    token,
    banner,
    lines,
    db,
    env: runEnv,
    async stop() {
      const code = await child.stop(DEV_STOP_TIMEOUT_MS);
      await db.drop();
      return code;
    },
  };
}

/** The banner's curl lines, as a user pastes them. */
export function printedCurls(run: DevRun): string[] {
  return run.banner.filter((line) => line.trim().startsWith("curl ")).map((line) => line.trim());
}

/** The banner's TypeScript snippet, as a user pastes it into a file. */
export function printedSnippet(run: DevRun): string {
  const start = run.banner.findIndex((line) => line.startsWith("or from TypeScript"));
  if (start < 0) throw new Error("the banner prints no TypeScript snippet");
  return run.banner.slice(start + 1).map((line) => line.replace(/^ {2}/, "")).join("\n");
}

// `bun test/private-dir-smoke.ts`: zero-setup from a private directory, as root. Clones this
// repository's HEAD into a fresh `mktemp -d`-style (0700) directory, copies node_modules in
// (as hard links when it can), and there, with DATABASE_URL and MQTT_URL unset:
// (a) `bun test`, the whole suite, passes on the embedded services, with a second run of
//     `bun test test/api.test.ts` at the same time (one run creates the cluster, the other
//     waits for it and shares it);
// (b) `bun run dev` serves a charge, names the cache folder in its Postgres start-up line,
//     and after a restart finds the same charge again (a replay).
// `bun test/private-dir-smoke.ts chaos` instead runs `bun run chaos` there (a short soak),
// every scenario on the embedded services that run-all starts once and hands over.
// Exit 0 with one "ok" line, 1 with one "FAILED" line and the output that explains it, or
// 77 with a "skipped" line when not root (the case only exists for root). Removes the clone
// and its clusters in the cache folder; the binaries' copy there is left for the next run.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CACHE_NAME } from "../dev/pg-place.ts";
import { freePort } from "../dev/ports.ts";
import { waitUntil, within } from "../testkit/wait.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SKIPPED = 77;
// The whole suite takes a few minutes on the embedded services; a first run also copies the
// binaries and runs initdb, and a loaded machine needs margin.
const TEST_RUN_TIMEOUT_MS = 600_000;
const DEV_READY_TIMEOUT_MS = 90_000;
// dev stops api, relay and subscriber (10 s bound each) and then Postgres.
const DEV_STOP_TIMEOUT_MS = 30_000;
// The watchdog stops the test run's Postgres within a poll of the run's exit.
const POSTGRES_GONE_TIMEOUT_MS = 20_000;
const OUTPUT_TAIL_LINES = 25;
// Every scenario, each bounded by run-all (60 s plus twice the soak); about 5 minutes when well.
const CHAOS_RUN_TIMEOUT_MS = 900_000;
const CHAOS_SOAK_SECONDS = "10";

class SmokeFailure extends Error {
  /** `whole`: print all of `output` (already cut to what explains it), not only its tail. */
  constructor(message: string, readonly output: string[] = [], readonly whole = false) {
    super(message);
  }
}

const started = performance.now();
let devPid: number | undefined;
let chaosPid: number | undefined;
const mode = process.argv[2] === "chaos" ? "chaos" : "tests and dev";

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) {
    console.log("private-dir smoke: skipped (only root runs the embedded Postgres as another user)");
    process.exit(SKIPPED);
  }
  const base = mkdtempSync(join(tmpdir(), "private-dir-"));
  const clone = join(base, "p");
  try {
    prepare(clone);
    const what = mode === "chaos" ? await runChaos(clone) : `${await runTests(clone)}; ${await runDevTwice(clone)}`;
    console.log(`private-dir smoke: ok (${what}) in ${Math.round(performance.now() - started)} ms`);
  } finally {
    if (devPid) killGroup(devPid);
    if (chaosPid) killGroup(chaosPid);
    await removeClusters(clone);
    rmSync(base, { recursive: true, force: true });
  }
}

function prepare(clone: string): void {
  run(["git", "clone", "--quiet", ROOT, clone], "git clone");
  // Hard links when on one filesystem (a 175 MB copy takes tens of seconds on a busy disk):
  // what the postgres user cannot do is traverse the clone's path, whatever the inodes.
  const linked = spawnSync("cp", ["-al", join(ROOT, "node_modules"), join(clone, "node_modules")]);
  if (linked.status !== 0) {
    rmSync(join(clone, "node_modules"), { recursive: true, force: true });
    run(["cp", "-a", join(ROOT, "node_modules"), join(clone, "node_modules")], "copying node_modules");
  }
  // Without this the run below would prove nothing: the postgres user must be locked out of the clone.
  const mode = statSync(dirname(clone)).mode & 0o777;
  if (mode !== 0o700) throw new SmokeFailure(`${dirname(clone)} has mode ${mode.toString(8)}, not 0700`);
  const probe = spawnSync("runuser", ["-u", "postgres", "--", "test", "-x", join(clone, "node_modules")]);
  if (probe.status === 0) throw new SmokeFailure(`the postgres user can reach ${clone}: nothing to prove`);
}

/** Services from nowhere: no URL variables, the embedded source forced. */
function bareEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && name !== "DATABASE_URL" && name !== "MQTT_URL") env[name] = value;
  }
  return { ...env, ...extra };
}

/** Two runs at once on the fresh clone: one creates the cluster, the other waits and shares it. */
async function runTests(clone: string): Promise<string> {
  // The whole suite, and beside it a second run that must share the cluster the first starts.
  const [all, second] = await Promise.all([runBunTest(clone, []), runBunTest(clone, ["test/api.test.ts"])]);
  return `bun test: ${all} pass, with bun test test/api.test.ts at the same time: ${second} pass`;
}

async function runBunTest(clone: string, files: string[]): Promise<number> {
  const command = ["bun", "test", ...files].join(" ");
  const run = Bun.spawn([process.execPath, "test", ...files], {
    cwd: clone,
    env: bareEnv({ TEST_SERVICES: "embedded" }),
    stdout: "pipe",
    stderr: "pipe",
    timeout: TEST_RUN_TIMEOUT_MS,
  });
  const lines: string[] = [];
  await Promise.all([collect(run.stdout, lines), collect(run.stderr, lines), run.exited]);
  const passed = Number(lines.find((line) => /^ *\d+ pass$/.test(line))?.trim().split(" ")[0] ?? 0);
  const failed = lines.some((line) => /^ *[1-9]\d* fail$/.test(line));
  if (run.exitCode !== 0 || failed || passed === 0) throw new SmokeFailure(`${command} exited ${run.exitCode}`, [...failureContext(lines), ...lines.slice(-OUTPUT_TAIL_LINES)], true);
  return passed;
}

// Bun prints a failed test's error right above its first "(fail)" line; the summary at the
// end repeats only the names. This many lines above each show the assertion and its values.
const ERROR_CONTEXT_LINES = 20;
// Enough failures to see a pattern; the rest are named in the tail's summary.
const FAILURES_SHOWN = 5;

/** The lines above each failed test's first "(fail)" line: what failed, not only which. */
function failureContext(lines: readonly string[]): string[] {
  const seen = new Set<string>();
  const context: string[] = [];
  lines.forEach((line, i) => {
    if (!line.startsWith("(fail)") || seen.has(line) || seen.size >= FAILURES_SHOWN) return;
    seen.add(line);
    context.push(...lines.slice(Math.max(0, i - ERROR_CONTEXT_LINES), i + 1), "");
  });
  return context;
}

/** `bun run chaos` with nothing set: the summary line must say every scenario passed. */
async function runChaos(clone: string): Promise<string> {
  const env = bareEnv({ TEST_SERVICES: "embedded", CHAOS_SOAK_SECONDS });
  // Its own process group: a run cut short takes its scenarios and their processes with it.
  const run = Bun.spawn([process.execPath, "run", "chaos"], { cwd: clone, env, stdout: "pipe", stderr: "pipe", detached: true });
  chaosPid = run.pid;
  const lines: string[] = [];
  const output = Promise.all([collect(run.stdout, lines), collect(run.stderr, lines), run.exited]);
  if ((await within(output, CHAOS_RUN_TIMEOUT_MS)) === undefined) {
    throw new SmokeFailure(`bun run chaos ran past ${CHAOS_RUN_TIMEOUT_MS / 1000} s`, lines);
  }
  chaosPid = undefined;
  const summary = lines.filter((line) => /^\d+ passed, \d+ failed$/.test(line)).pop() ?? "";
  const [passed, failed] = (summary.match(/\d+/g) ?? []).map(Number);
  if (run.exitCode !== 0 || failed !== 0 || !passed) {
    // What explains it: each scenario's verdict and every violated invariant.
    const verdicts = lines.filter((line) => /VIOLATED|^chaos|^ {2}(PASS|FAIL) /.test(line));
    throw new SmokeFailure(`bun run chaos exited ${run.exitCode}: ${summary || "no summary line"}`, verdicts);
  }
  return `bun run chaos, nothing set, CHAOS_SOAK_SECONDS=${CHAOS_SOAK_SECONDS}: ${summary}`;
}

async function runDevTwice(clone: string): Promise<string> {
  const key = crypto.randomUUID();
  const first = await withDev(clone, (api, authorization) => postCharge(api, key, authorization));
  if (first.status !== 201) throw new SmokeFailure(`POST /charges answered ${first.status}, not 201`, [first.body]);
  const again = await withDev(clone, (api, authorization) => postCharge(api, key, authorization));
  if (again.replayed !== "true" || again.body !== first.body) {
    throw new SmokeFailure(`after a restart the same key answered ${again.status} (replayed: ${again.replayed}), not the stored charge`, [first.body, again.body]);
  }
  return `bun run dev: 201, then the same charge replayed after a restart; data in ${first.dataDir}`;
}

interface Answer {
  readonly status: number;
  readonly replayed: string | null;
  readonly body: string;
  readonly dataDir: string;
}

/** Starts `bun run dev` in the clone, checks its Postgres line, runs `use`, stops it with SIGTERM. */
async function withDev(clone: string, use: (api: string, authorization: string) => Promise<Omit<Answer, "dataDir">>): Promise<Answer> {
  const port = await freePort();
  const env = bareEnv({ PORT: String(port), RELAY_PORT: String(await freePort()), NO_COLOR: "1" });
  const dev = Bun.spawn([process.execPath, "run", "dev"], { cwd: clone, env, stdout: "pipe", stderr: "pipe", detached: true });
  devPid = dev.pid;
  const lines: string[] = [];
  void collect(dev.stdout, lines);
  void collect(dev.stderr, lines);
  await waitUntil(() => {
    if (dev.exitCode !== null) throw new SmokeFailure(`bun run dev exited ${dev.exitCode} before it was ready`, lines);
    // The banner's last line, the curl to paste: the whole banner is in by then.
    return lines.some((line) => line.includes("ready: api, relay and subscriber are running")) && lines.some((line) => line.includes("curl -i -X POST"));
  }, DEV_READY_TIMEOUT_MS, "bun run dev to be ready").catch((error: unknown) => {
    throw error instanceof SmokeFailure ? error : new SmokeFailure(String(error), lines);
  });
  const dataDir = cacheDataDir(lines);
  // The token of the curl dev mode prints, as a user would paste it.
  const authorization = lines.map((line) => /-H 'Authorization: ([^']+)'/.exec(line)?.[1]).find(Boolean);
  if (!authorization) throw new SmokeFailure("the curl bun run dev printed carries no Authorization header", lines);
  const answer = await use(`http://127.0.0.1:${port}`, authorization);
  // To the group, as a terminal's Ctrl-C would reach `bun run` and the script it runs.
  killPid(-dev.pid, "SIGTERM");
  const code = await within(dev.exited, DEV_STOP_TIMEOUT_MS);
  if (code !== 0) throw new SmokeFailure(`bun run dev ended with ${code ?? "no exit"} after SIGTERM`, lines);
  devPid = undefined;
  return { ...answer, dataDir };
}

/** The start-up line must name the cluster's place in the cache folder, and why. */
function cacheDataDir(lines: string[]): string {
  const folder = join(realpathSync(tmpdir()), CACHE_NAME);
  const line = lines.find((text) => text.includes("embedded Postgres") && text.includes("data in"));
  const match = line?.match(/data in (\S+), because the user "postgres" cannot reach this project's directory/);
  if (!match?.[1]?.startsWith(`${folder}/`) || !match[1].endsWith("/postgres")) {
    throw new SmokeFailure(`the Postgres start-up line does not name a place in ${folder}: ${line ?? "(none)"}`, lines);
  }
  return match[1];
}

async function postCharge(api: string, key: string, authorization: string): Promise<Omit<Answer, "dataDir">> {
  const response = await fetch(`${api}/charges`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, Authorization: authorization },
    // Dev mode charges through the processor simulator: a test card.
    body: JSON.stringify({ amountCents: 4900, paymentMethod: "pm_card_visa" }),
  });
  return { status: response.status, replayed: response.headers.get("Idempotent-Replayed"), body: await response.text() };
}

async function collect(stream: ReadableStream<Uint8Array>, lines: string[]): Promise<void> {
  const decoder = new TextDecoder();
  const reader = stream.getReader();
  let pending = "";
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    const parts = (pending + decoder.decode(read.value, { stream: true })).split("\n");
    pending = parts.pop() ?? "";
    lines.push(...parts.filter((line) => line.trim()));
  }
}

/** The clone's folder in the cache (found by its origin file), once its servers are gone. */
async function removeClusters(clone: string): Promise<void> {
  const cache = join(tmpdir(), CACHE_NAME);
  if (!existsSync(cache)) return;
  for (const entry of readdirSync(cache)) {
    const origin = join(cache, entry, "origin");
    if (!existsSync(origin) || !readFileSync(origin, "utf8").startsWith(`${realpathSync(dirname(clone))}/`)) continue;
    const pidFiles = ["postgres", "test-postgres"].map((name) => join(cache, entry, name, "postmaster.pid"));
    await waitUntil(() => pidFiles.every((file) => !existsSync(file)), POSTGRES_GONE_TIMEOUT_MS, "the clone's Postgres servers to stop").catch(() => {
      for (const file of pidFiles.filter(existsSync)) killPid(Number.parseInt(readFileSync(file, "utf8"), 10), "SIGQUIT");
    });
    rmSync(join(cache, entry), { recursive: true, force: true });
  }
}

function run(cmd: string[], what: string): void {
  const result = spawnSync(cmd[0]!, cmd.slice(1), { encoding: "utf8" });
  if (result.status !== 0) throw new SmokeFailure(`${what} failed: ${(result.stderr || result.error?.message || "").trim()}`);
}

const killGroup = (pid: number): void => killPid(-pid, "SIGKILL");

function killPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

main().catch((error: unknown) => {
  const output = error instanceof SmokeFailure ? error.output : [];
  console.log(`private-dir smoke: FAILED ${error instanceof Error ? error.message : String(error)}`);
  const whole = error instanceof SmokeFailure && error.whole;
  for (const line of whole ? output : output.slice(-OUTPUT_TAIL_LINES)) console.log(`  ${line}`);
  process.exit(1);
});

// What a newcomer pastes works: every shell block of README.md and docs/dev-mode.md, and the
// README's TypeScript, run against a real `bun run dev` (started by the block that starts it,
// `AUTH_MODE=none bun run dev` included), with the port, token and URLs it printed put in for
// the ones the docs show. A block that cannot run says why in a marker before it,
// `<!-- not run: why -->`; `<!-- run: servers -->` starts each line as a server and waits until
// it answers. A failing block fails the test that names it (file and line).
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "../dev/ports.ts";
import { ROOT, spawnChild, waitForHttp } from "../testkit/processes.ts";
import { startDev, type DevRun } from "./docs-dev.ts";
import { docBlocks, type DocBlock } from "./docs-blocks.ts";

setDefaultTimeout(120_000);

const FILES = ["README.md", "docs/dev-mode.md"];
// A block's commands run as they would in a user's second terminal: none of the test's settings.
const USER_ENV = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", NO_COLOR: "1" };
// curl that fails on an HTTP error, as a user would notice it; quiet but for errors.
const SHELL_PREAMBLE = 'set -euo pipefail\ncurl() { command curl --fail-with-body -sS "$@"; }\n';
// A dev mode's API pool is the API's default; these runs need few connections of the shared server.
const DEV_TEST_ENV = { API_POOL_SIZE: "4" };

await mkdir(join(ROOT, ".data"), { recursive: true });
const folder = await mkdtemp(join(ROOT, ".data", "docs-run-"));
const devs = new Map<string, Promise<DevRun>>();
afterAll(async () => {
  for (const dev of devs.values()) await (await dev).stop().catch(() => 0);
  await rm(folder, { recursive: true, force: true });
});

/** The dev mode of `env` (one per mode, shared by the blocks of both files). */
function devFor(env: Record<string, string>): Promise<DevRun> {
  const key = JSON.stringify(Object.entries(env).sort());
  let dev = devs.get(key);
  if (dev === undefined) {
    const label = Object.entries(env).map(([k, v]) => `${k}_${v}`.toLowerCase()).join("_") || "default";
    dev = startDev(`run_${label}`.slice(0, 40), { ...DEV_TEST_ENV, ...env });
    devs.set(key, dev);
  }
  return dev;
}

/** The values a user copies from the banner, put where the docs show them. */
function substitute(code: string, dev: DevRun): string {
  const simulator = dev.banner.join("\n").match(/processor +(http:\/\/127\.0\.0\.1:\d+)/)?.[1];
  let out = code
    .replaceAll(/http:\/\/(?:localhost|127\.0\.0\.1):3000/g, dev.api)
    .replaceAll(/http:\/\/(?:localhost|127\.0\.0\.1):9465/g, dev.relay)
    .replaceAll("postgres://postgres@127.0.0.1:5432/postgres", dev.db.url)
    .replaceAll("mqtt://127.0.0.1:1883", dev.env.MQTT_URL!)
    .replaceAll(/Bearer eyJ[A-Za-z0-9._-]*…/g, `Bearer ${dev.token ?? ""}`);
  if (out.includes("http://127.0.0.1:<port>")) {
    if (simulator === undefined) throw new Error("the block uses the simulator's <port>, but this dev mode printed no simulator");
    out = out.replaceAll("http://127.0.0.1:<port>", simulator);
  }
  return out;
}

async function runShell(code: string, env: Record<string, string> = {}): Promise<{ code: number; output: string }> {
  const proc = Bun.spawn(["bash", "-c", SHELL_PREAMBLE + code], { cwd: ROOT, env: { ...USER_ENV, ...env }, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, exit] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code: exit, output: `${stdout}${stderr}`.trim() };
}

/** `<!-- run: servers -->`: each line a long-running process; holds once each answers its ready path. */
async function runServers(block: DocBlock, dev: DevRun): Promise<void> {
  const lines = substitute(block.code, dev).split("\n").filter((line) => line.trim() !== "");
  const ports = { PORT: String(await freePort()), RELAY_PORT: String(await freePort()) };
  const env = { ...USER_ENV, ...ports, ...DEV_TEST_ENV, MQTT_TOPIC_PREFIX: `docs-servers-${process.pid}/` };
  const children = lines.map((line, i) => spawnChild(["bash", "-c", line], { name: `${block.where} line ${i + 1}`, env, processGroup: true }));
  try {
    for (const [i, line] of lines.entries()) {
      const url = / bun relay\.ts$/.test(line) ? `http://127.0.0.1:${ports.RELAY_PORT}/healthz` : `http://127.0.0.1:${ports.PORT}/readyz`;
      await waitForHttp(children[i]!, url, 30_000);
    }
  } finally {
    await Promise.all(children.map((child) => child.stop(10_000)));
  }
}

async function runTypeScript(block: DocBlock, dev: DevRun): Promise<void> {
  const file = join(folder, `block-${block.line}.ts`);
  await writeFile(file, substitute(block.code, dev));
  const proc = Bun.spawn(["bun", file], { cwd: ROOT, env: { ...USER_ENV, ...(dev.token ? { API_TOKEN: dev.token } : {}) }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exit] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  expect({ block: block.where, exit, stderr }).toEqual({ block: block.where, exit: 0, stderr: "" });
  expect(stdout.trim()).not.toBe("");
}

for (const file of FILES) {
  const blocks = docBlocks(readFileSync(join(ROOT, file), "utf8"), file);
  describe(file, () => {
    test("has blocks to run, and each one not run says why", () => {
      expect(blocks.filter((b) => b.skip === undefined).length).toBeGreaterThanOrEqual(4);
      for (const block of blocks) if (block.skip !== undefined) expect({ block: block.where, why: block.skip.trim().length > 3 }).toEqual({ block: block.where, why: true });
    });
    // Blocks run in the order of the page: a block that starts dev mode sets the mode of those after it.
    let mode: Record<string, string> = {};
    for (const block of blocks) {
      if (block.skip !== undefined) continue;
      const blockMode = block.devStart?.env ?? mode;
      mode = blockMode;
      test(`${block.where}: ${block.code.split("\n")[0]}`, async () => {
        const dev = await devFor(blockMode);
        if (block.lang === "ts") return runTypeScript(block, dev);
        if (block.marker === "servers") return runServers(block, dev);
        const code = block.devStart ? block.devStart.rest : block.code;
        if (code.trim() === "") return;
        const run = await runShell(substitute(code, dev));
        expect({ block: block.where, exit: run.code, output: run.code === 0 ? "" : run.output }).toEqual({ block: block.where, exit: 0, output: "" });
      });
    }
  });
}

// `bun test/client-smoke.ts`: proves charges-outbox/client runs unchanged on Deno, on Node
// (its built export, `bun run client:build`) and on workerd (a worker module that imports
// it), against a real `bun api.ts` behind the fault
// proxy, which drops the answer to each runtime's first POST /charges: the client must retry
// with the same key and get the replay. Exit 0 with one "ok" line per runtime, or 1 with one
// "FAILED" line followed by the processes' last output.
import { createRequire } from "node:module";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../dev/ports.ts";
import { createScratchDatabase, scratchName, type ScratchDatabase } from "../testkit/database.ts";
import { startFaultProxy, type Fate, type FaultProxy } from "../testkit/http-fault-proxy.ts";
import { acceptsTcp, killAll, ROOT, runToExit, spawnChild, startEntrypoint, type Child } from "../testkit/processes.ts";
import { processServices } from "../testkit/services.ts";
import { authEnv, tokenFor } from "../testkit/auth.ts";
import { waitUntil } from "../testkit/wait.ts";
import type { ExerciseResult } from "./fixtures/client-exercise.ts";

// Deno's first run resolves the npm packages and compiles: allow for a cold cache.
const READY_TIMEOUT_MS = 60_000;
const REFUND_CENTS = 321;

class SmokeFailure extends Error {}

const children: Child[] = [];

async function main(): Promise<void> {
  const { adminDatabaseUrl } = await processServices("the client smoke test").catch((error: Error) => {
    throw new SmokeFailure(error.message);
  });
  const db = await createScratchDatabase(adminDatabaseUrl, scratchName("client", "smoke"));
  let dropNext = false;
  const decide = (r: { method: string; path: string }): Fate => (r.method === "POST" && r.path === "/charges" && dropNext ? ((dropNext = false), "drop") : "pass");
  try {
    const api = await startEntrypoint("api", { env: { DATABASE_URL: db.url, LOG_LEVEL: "warn", ...authEnv() }, stdout: "tail" });
    children.push(api.child);
    const proxy = await startFaultProxy({ upstreams: [api.port], decide });
    try {
      for (const runtime of ["deno", "node", "workerd"] as const) {
        const started = performance.now();
        dropNext = true;
        const result = await RUNNERS[runtime](proxy);
        await verify(runtime, result, db);
        console.log(`client smoke: ok on ${runtime} in ${Math.round(performance.now() - started)} ms (first answer lost, retried into the replay)`);
      }
    } finally {
      await proxy.close();
    }
  } finally {
    await Promise.all(children.map((child) => child.stop()));
    await db.drop().catch(() => {});
  }
}

async function onDeno(proxy: FaultProxy): Promise<ExerciseResult> {
  const run = await runToExit(["deno", "run", "-A", "test/fixtures/client-deno.ts", proxy.url, await tokenFor()]);
  if (run.code !== 0) throw new SmokeFailure(`deno exited with ${run.code}: ${run.stderr.slice(-800)}`);
  return JSON.parse(run.stdout.trim().split("\n").pop() ?? "") as ExerciseResult;
}

/** Builds the client's Node export, bundles test/fixtures/client-node.ts inside the repo (so the package's own name resolves), runs it with node. */
async function onNode(proxy: FaultProxy): Promise<ExerciseResult> {
  const build = await runToExit(["bun", "run", "client:build"]);
  if (build.code !== 0) throw new SmokeFailure(`bun run client:build failed: ${build.stderr.slice(-500)}`);
  mkdirSync(join(ROOT, ".data"), { recursive: true });
  const dir = mkdtempSync(join(ROOT, ".data", "client-node-"));
  try {
    const entry = join(ROOT, "test/fixtures/client-node.ts");
    const built = await Bun.build({ entrypoints: [entry], outdir: dir, naming: "client-node.mjs", target: "node", format: "esm", external: ["charges-outbox/client"] });
    if (!built.success) throw new SmokeFailure(`bundling the Node fixture failed: ${built.logs.map(String).join("; ")}`);
    const run = await runToExit(["node", join(dir, "client-node.mjs"), proxy.url, await tokenFor()]);
    if (run.code !== 0) throw new SmokeFailure(`node exited with ${run.code}: ${run.stderr.slice(-800)}`);
    return JSON.parse(run.stdout.trim().split("\n").pop() ?? "") as ExerciseResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Bundles test/fixtures/client-worker.ts, serves it on workerd, and calls it once. */
async function onWorkerd(proxy: FaultProxy): Promise<ExerciseResult> {
  const dir = mkdtempSync(join(tmpdir(), "client-workerd-"));
  try {
    const built = await Bun.build({ entrypoints: [join(ROOT, "test/fixtures/client-worker.ts")], outdir: dir, naming: "worker.js", target: "browser", format: "esm" });
    if (!built.success) throw new SmokeFailure(`bundling the worker failed: ${built.logs.map(String).join("; ")}`);
    const port = await freePort();
    writeFileSync(join(dir, "config.capnp"), await workerdConfig(port));
    const workerd = (createRequire(import.meta.url)("workerd") as { default: string }).default;
    const child = spawnChild([workerd, "serve", join(dir, "config.capnp")], { name: "workerd", env: { API_BASE: proxy.url, API_TOKEN: await tokenFor() }, stdout: "tail" });
    children.push(child);
    await waitUntil(() => {
      if (child.exited) throw new SmokeFailure(`workerd exited with ${child.exitCode}: ${child.output().slice(-500)}`);
      return acceptsTcp(port);
    }, READY_TIMEOUT_MS, "workerd to listen", 50);
    const response = await fetch(`http://127.0.0.1:${port}/`);
    const body = await response.text();
    if (response.status !== 200) throw new SmokeFailure(`the worker answered ${response.status}: ${body.slice(0, 500)}`);
    await child.stop();
    return JSON.parse(body) as ExerciseResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const RUNNERS = { deno: onDeno, node: onNode, workerd: onWorkerd } as const;

async function workerdConfig(port: number): Promise<string> {
  const toml = Bun.TOML.parse(await Bun.file(join(ROOT, "wrangler.toml")).text()) as { compatibility_date: string; compatibility_flags?: string[] };
  const flags = (toml.compatibility_flags ?? []).map((f) => JSON.stringify(f)).join(", ");
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [(name = "worker.js", esModule = embed "worker.js")],
  compatibilityDate = ${JSON.stringify(toml.compatibility_date)},
  compatibilityFlags = [${flags}],
  bindings = [
    (name = "API_BASE", fromEnvironment = "API_BASE"),
    (name = "API_TOKEN", fromEnvironment = "API_TOKEN"),
  ],
  globalOutbound = "internet",
);
`;
}

async function verify(runtime: string, r: ExerciseResult, db: ScratchDatabase): Promise<void> {
  const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
  check(same(r.first, [true, 2]), `${runtime}: the first create (answer dropped) gave [replayed, attempts] ${JSON.stringify(r.first)}, not [true, 2]`);
  check(same(r.again, [true, 1]), `${runtime}: the same key again gave ${JSON.stringify(r.again)}, not [true, 1]`);
  check(same(r.refund, [false, 1]) && r.refundedCents === REFUND_CENTS, `${runtime}: the refund gave ${JSON.stringify(r.refund)}, refunded ${r.refundedCents}`);
  const rows = await db.sql<{ refunded: number; keys: number }[]>`
    select c.refunded_cents as refunded, (select count(*)::int from idempotency_keys k where k.key = ${r.key}) as keys
      from charges c where c.id = ${r.chargeId}`;
  check(rows.length === 1 && rows[0]!.refunded === REFUND_CENTS && rows[0]!.keys === 1, `${runtime}: the database holds ${JSON.stringify(rows)} for charge ${r.chargeId}`);
}

function check(condition: boolean, message: string): void {
  if (!condition) throw new SmokeFailure(message);
}

main().then(
  () => process.exit(0),
  async (error: unknown) => {
    console.error(`client smoke: FAILED: ${error instanceof Error ? error.message : String(error)}`);
    for (const child of children) for (const line of child.output().split("\n").slice(-15)) if (line.trim()) console.error(`  ${child.name} | ${line}`);
    await killAll();
    process.exit(1);
  },
);

// `bun run worker:dev`: worker.ts on workerd, the Cloudflare Workers runtime, on this machine.
// Bundles worker.ts with Bun (the `workerd` export conditions, so postgres.js takes its
// cloudflare:sockets build), writes a workerd config that takes the compatibility date, flags
// and [vars] from wrangler.toml, and runs the workerd binary of the `workerd` npm package.
// The bindings are the variables the API reads, from this process's environment: DATABASE_URL,
// the AUTH_* and API_* variables, LOG_LEVEL, IDEMPOTENCY_TTL_SECONDS, OTEL_EXPORTER_OTLP_ENDPOINT.
// Secrets are passed through workerd's environment (fromEnvironment), never written to disk.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const ROOT = new URL("..", import.meta.url).pathname;

/** The variables a worker reads, by name or prefix. */
const BINDING_NAMES = ["DATABASE_URL", "LOG_LEVEL", "IDEMPOTENCY_TTL_SECONDS", "OTEL_EXPORTER_OTLP_ENDPOINT"];
const BINDING_PREFIXES = ["AUTH_", "API_"];

interface WranglerToml {
  readonly main: string;
  readonly compatibility_date: string;
  readonly compatibility_flags?: readonly string[];
  readonly vars?: Record<string, string>;
}

export interface WorkerdPlan {
  /** The command to run workerd with. */
  readonly cmd: readonly string[];
  /** The environment workerd needs: the bindings it reads by name. */
  readonly env: Record<string, string>;
  /** Removes the bundle and the config. */
  cleanup(): void;
}

/** Bundles worker.ts and writes a workerd config serving it on `host:port`. */
export async function planWorkerd(port: number, env: Record<string, string | undefined>, host = "*"): Promise<WorkerdPlan> {
  const toml = Bun.TOML.parse(await Bun.file(join(ROOT, "wrangler.toml")).text()) as unknown as WranglerToml;
  const dir = mkdtempSync(join(tmpdir(), "charges-workerd-"));
  const built = await Bun.build({
    entrypoints: [join(ROOT, toml.main)],
    outdir: dir,
    naming: "worker.js",
    target: "browser",
    format: "esm",
    conditions: ["workerd", "worker"],
    external: ["node:*", "cloudflare:*"],
  });
  if (!built.success) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`bundling ${toml.main} failed: ${built.logs.map(String).join("; ")}`);
  }
  const bindings: Record<string, string> = { ...toml.vars };
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && (BINDING_NAMES.includes(name) || BINDING_PREFIXES.some((p) => name.startsWith(p)))) bindings[name] = value;
  }
  writeFileSync(join(dir, "config.capnp"), capnpConfig(toml, port, host, Object.keys(bindings)));
  // The `workerd` package's main module names the binary its platform package installed.
  const workerdBinary = (createRequire(import.meta.url)("workerd") as { default: string }).default;
  return {
    cmd: [workerdBinary, "serve", join(dir, "config.capnp"), "--verbose"],
    env: bindings,
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

function capnpConfig(toml: WranglerToml, port: number, host: string, bindingNames: readonly string[]): string {
  const text = (value: string): string => JSON.stringify(value); // names and flags are plain ASCII
  const bindings = bindingNames.map((name) => `(name = ${text(name)}, fromEnvironment = ${text(name)})`).join(",\n    ");
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    # Locally the database is on a private or loopback address, which Cloudflare's network refuses.
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [(name = "http", address = ${text(`${host}:${port}`)}, http = (), service = "main")],
);

const worker :Workerd.Worker = (
  modules = [(name = "worker.js", esModule = embed "worker.js")],
  compatibilityDate = ${text(toml.compatibility_date)},
  compatibilityFlags = [${(toml.compatibility_flags ?? []).map(text).join(", ")}],
  bindings = [
    ${bindings}
  ],
  globalOutbound = "internet",
);
`;
}

if (import.meta.main) {
  const port = Number(process.env.PORT ?? 3000);
  const plan = await planWorkerd(port, process.env);
  const child = Bun.spawn([...plan.cmd], { env: { ...process.env, ...plan.env }, stdio: ["inherit", "inherit", "inherit"] });
  console.log(JSON.stringify({ level: "info", component: "worker:dev", msg: "workerd serving worker.ts", port }));
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => child.kill(signal));
  const code = await child.exited;
  plan.cleanup();
  process.exit(code);
}

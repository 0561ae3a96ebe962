// The project as its users get it: `npm pack` (its prepack builds the Node exports), then
// `npm install` of the tarball into a scratch Node project in a temporary directory, where a
// program imports charges-outbox/client and charges-outbox/subscriber by name.
import { copyFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "./processes.ts";

export interface Installed {
  /** The scratch project: node_modules/charges-outbox and its dependencies. */
  readonly dir: string;
  /** The tarball's size in bytes and its number of files. */
  readonly tarball: { readonly bytes: number; readonly files: number };
  remove(): Promise<void>;
}

async function run(cmd: readonly string[], cwd: string): Promise<string> {
  const proc = Bun.spawn([...cmd], { cwd, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited with ${code}: ${stderr.slice(-1500)}`);
  return stdout;
}

/** Packs the project at `root` (this checkout by default) and installs it into a new scratch project. */
export async function installPacked(root: string = ROOT): Promise<Installed> {
  const dir = await mkdtemp(join(tmpdir(), "charges-outbox-user-"));
  const packed = JSON.parse(await run(["npm", "pack", "--json", "--pack-destination", dir], root)) as { filename: string; size: number; entryCount: number }[];
  const { filename, size, entryCount } = packed[0]!;
  await writeFile(join(dir, "package.json"), JSON.stringify({ name: "scratch-user", private: true, type: "module" }));
  await run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", join(dir, filename)], dir);
  return { dir, tarball: { bytes: size, files: entryCount }, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** Copies a program into the scratch project, so that it resolves the installed package. */
export async function placeProgram(installed: Installed, source: string, name: string): Promise<string> {
  const target = join(installed.dir, name);
  await copyFile(source, target);
  return target;
}

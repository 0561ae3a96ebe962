// `npm pack`'s prepack: what the package's Node users import, built from the TypeScript that
// Bun and Deno import as is. Node 20 runs JavaScript only: the client and the subscriber
// library are bundled for Node (their npm dependencies left as imports), and their
// declarations written for TypeScript on Node, with the relative imports pointing at .js.
import { cp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

const ROOT = new URL("..", import.meta.url).pathname;
const TYPES = join(ROOT, "dist/types");

async function bundle(entrypoints: string[], outdir: string): Promise<void> {
  const result = await Bun.build({ entrypoints: entrypoints.map((e) => join(ROOT, e)), outdir: join(ROOT, outdir), target: "node", format: "esm", packages: "external" });
  if (!result.success) throw new Error(`bun build of ${entrypoints.join(", ")} failed: ${result.logs.map(String).join("\n")}`);
}

async function declarations(entrypoints: string[]): Promise<void> {
  const flags = ["--declaration", "--emitDeclarationOnly", "--outDir", TYPES, "--rootDir", ROOT, "--module", "esnext", "--moduleResolution", "bundler", "--target", "es2022"];
  const more = ["--allowImportingTsExtensions", "--skipLibCheck", "--strict", "--verbatimModuleSyntax", "--types", "bun-types"];
  // Its errors come on stdout, which npm pack --json keeps for its own answer: told on stderr.
  const tsc = Bun.spawn(["bun", "x", "tsc", ...entrypoints, ...flags, ...more], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
  const said = await new Response(tsc.stdout).text();
  if ((await tsc.exited) !== 0) throw new Error(`tsc could not write the declarations:\n${said}`);
  // tsc writes no declaration for a declaration file: the client's OpenAPI types go as they are.
  await cp(join(ROOT, "client/openapi.d.ts"), join(TYPES, "client/openapi.d.ts"));
  for (const file of await readdir(TYPES, { recursive: true })) if (file.endsWith(".d.ts")) await rewriteImports(join(TYPES, file));
}

// `./x.ts` and `./x.d.ts` -> `./x.js`: what TypeScript on Node resolves to ./x.d.ts.
async function rewriteImports(file: string): Promise<void> {
  const text = await readFile(file, "utf8");
  await writeFile(file, text.replace(/(from\s+["']\.{1,2}\/[^"']*?)(?:\.d)?\.ts(["'])/g, "$1.js$2"));
}

await rm(join(ROOT, "dist"), { recursive: true, force: true });
await rm(join(ROOT, "client/dist"), { recursive: true, force: true });
await bundle(["client/index.ts", "client/file-store.ts"], "client/dist");
await bundle(["lib/subscriber/index.ts"], "dist/subscriber");
await declarations(["client/index.ts", "client/file-store.ts", "lib/subscriber/index.ts"]);
console.error("built client/dist, dist/subscriber and dist/types");

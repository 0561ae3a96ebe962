// `bun run lint:openapi`: writes the /openapi.json of an in-process API to a scratch directory
// and lints it with Redocly's recommended rules (as errors: recommended-strict) and Spectral's
// spectral:oas ruleset (failing on warnings too). Exit 0 only when both find nothing.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { servedOpenApi } from "../testkit/openapi-types.ts";

const BIN = new URL("../node_modules/.bin/", import.meta.url).pathname;

function run(command: string[]): boolean {
  console.log(`$ ${command.join(" ")}`);
  // No telemetry or update check: CI reaches nothing but the npm registry.
  const env = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" };
  return Bun.spawnSync(command, { stdout: "inherit", stderr: "inherit", env }).exitCode === 0;
}

if (import.meta.main) {
  const dir = mkdtempSync(join(tmpdir(), "openapi-lint-"));
  try {
    const document = join(dir, "openapi.json");
    writeFileSync(document, JSON.stringify(await servedOpenApi(), null, 2));
    const ruleset = join(dir, ".spectral.yaml");
    writeFileSync(ruleset, 'extends: ["spectral:oas"]\n');
    const redocly = run([`${BIN}redocly`, "lint", "--extends=recommended-strict", document]);
    const spectral = run([`${BIN}spectral`, "lint", "--fail-severity=warn", "--ruleset", ruleset, document]);
    console.log(`lint:openapi: redocly ${redocly ? "clean" : "FAILED"}, spectral ${spectral ? "clean" : "FAILED"}`);
    process.exitCode = redocly && spectral ? 0 : 1;
  } catch (error) {
    console.error(`lint:openapi: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit();
}

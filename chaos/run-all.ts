// `bun run chaos`: runs every scenario in chaos/ (files named <n>-*.ts) one after the other,
// each as its own process, streams its output, and ends with a table of results and the line
// "N passed, N failed". Exit 0 only when every scenario held every invariant.
// `bun chaos/run-all.ts 1 4` runs only scenarios 1 and 4.
import { readdirSync } from "node:fs";

const dir = new URL(".", import.meta.url).pathname;
const only = process.argv.slice(2);
const scripts = readdirSync(dir)
  .filter((f) => /^\d+-.*\.ts$/.test(f))
  .sort((a, b) => parseInt(a, 10) - parseInt(b, 10))
  .filter((f) => only.length === 0 || only.includes(String(parseInt(f, 10))));

// A scenario that hangs past this is killed and counted as failed.
const SCENARIO_TIMEOUT_MS = 60_000 + 2000 * Number(process.env.CHAOS_SOAK_SECONDS ?? 60);

const results: { name: string; ok: boolean; seconds: number }[] = [];
const started = Date.now();
for (const file of scripts) {
  const t0 = Date.now();
  const proc = Bun.spawn(["bun", `${dir}${file}`], { stdout: "inherit", stderr: "inherit", env: process.env });
  const timer = setTimeout(() => {
    console.log(`chaos: ${file} ran past ${SCENARIO_TIMEOUT_MS / 1000} s; killing it`);
    proc.kill("SIGTERM");
    setTimeout(() => proc.kill("SIGKILL"), 5000);
  }, SCENARIO_TIMEOUT_MS);
  const code = await proc.exited;
  clearTimeout(timer);
  results.push({ name: file.replace(/\.ts$/, ""), ok: code === 0, seconds: (Date.now() - t0) / 1000 });
  console.log("");
}

const passed = results.filter((r) => r.ok).length;
const failed = results.length - passed;
console.log("chaos summary");
for (const r of results) console.log(`  ${r.ok ? "PASS" : "FAIL"}  ${r.name.padEnd(34)} ${r.seconds.toFixed(1).padStart(6)} s`);
console.log(`  total: ${results.length} scenarios in ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);

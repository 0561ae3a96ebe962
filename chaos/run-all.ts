// `bun run chaos`: runs every scenario in chaos/ (files named <n>-*.ts) one after the other,
// each as its own process, streams its output, and ends with a table of results and the line
// "N passed, N failed". Exit 0 only when every scenario held every invariant; a scenario that
// cannot run here (a tool or an opt-in it needs is missing: chaos/lib/skip.ts) is counted as skipped.
// `bun chaos/run-all.ts 1 4` runs only scenarios 1 and 4.
// Services as `bun test` finds them (testkit/services.ts). The embedded ones, and the Docker
// containers, are started once, here, and handed to every scenario through the environment: the cluster is started (and on a
// first run created) once, and the in-process aedes broker lives in this process, which stays
// up for the whole run while the scenarios come and go.
import { readdirSync } from "node:fs";
import { dockerUsable } from "../testkit/containers.ts";
import { chooseSource, handedOver, services } from "../testkit/services.ts";
import { SCENARIO_SKIPPED } from "./lib/skip.ts";

const dir = new URL(".", import.meta.url).pathname;
const only = process.argv.slice(2);
const scripts = readdirSync(dir)
  .filter((f) => /^\d+-.*\.ts$/.test(f))
  .sort((a, b) => parseInt(a, 10) - parseInt(b, 10))
  .filter((f) => only.length === 0 || only.includes(String(parseInt(f, 10))));

// A scenario that hangs past this is killed and counted as failed.
const SCENARIO_TIMEOUT_MS = 60_000 + 2000 * Number(process.env.CHAOS_SOAK_SECONDS ?? 60);

/** The scenarios' environment: this one, plus the embedded services when they are the choice. */
async function scenarioEnv(): Promise<Record<string, string | undefined>> {
  const source = await chooseSource({ env: process.env, dockerAnswers: dockerUsable });
  if (source === "env") console.log("chaos: services: DATABASE_URL and MQTT_URL");
  if (source === "env") return process.env;
  const s = await services();
  if (source === "docker") {
    console.log(`chaos: services: Docker: Postgres ${s.adminDatabaseUrl}, broker ${s.mqttUrl} (containers of this run, removed when it ends)`);
    return { ...process.env, ...handedOver(s) };
  }
  const broker = s.mqtt5 ? s.mqttUrl : `${s.mqttUrl} (aedes in this process, MQTT 3.1.1 only)`;
  console.log(`chaos: services: embedded: Postgres ${s.adminDatabaseUrl}, broker ${broker}`);
  return { ...process.env, ...handedOver(s) };
}

const started = Date.now();
const env = await scenarioEnv().catch((error: unknown) => {
  console.log(`chaos: no services: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
const results: { name: string; ok: boolean; skipped: boolean; seconds: number }[] = [];
for (const file of scripts) {
  const t0 = Date.now();
  const proc = Bun.spawn(["bun", `${dir}${file}`], { stdout: "inherit", stderr: "inherit", env });
  const timer = setTimeout(() => {
    console.log(`chaos: ${file} ran past ${SCENARIO_TIMEOUT_MS / 1000} s; killing it`);
    proc.kill("SIGTERM");
    setTimeout(() => proc.kill("SIGKILL"), 5000);
  }, SCENARIO_TIMEOUT_MS);
  const code = await proc.exited;
  clearTimeout(timer);
  results.push({ name: file.replace(/\.ts$/, ""), ok: code === 0, skipped: code === SCENARIO_SKIPPED, seconds: (Date.now() - t0) / 1000 });
  console.log("");
}

const passed = results.filter((r) => r.ok).length;
const skipped = results.filter((r) => r.skipped).length;
const failed = results.length - passed - skipped;
console.log("chaos summary");
for (const r of results) console.log(`  ${r.ok ? "PASS" : r.skipped ? "SKIP" : "FAIL"}  ${r.name.padEnd(34)} ${r.seconds.toFixed(1).padStart(6)} s`);
console.log(`  total: ${results.length} scenarios in ${((Date.now() - started) / 1000).toFixed(1)} s${skipped > 0 ? `, ${skipped} skipped (a tool or an opt-in they need is missing: their lines above say which)` : ""}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed + skipped > 0 ? 0 : 1);

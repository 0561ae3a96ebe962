// What `bun run bench` collects and prints: the rows of its table, notes, the raw
// measurements for the JSON file, and the sections that produce them (a section that
// crashes is noted and makes the run exit 1; one whose tool is missing is skipped).
import { mkdir, writeFile } from "node:fs/promises";
import { MissingTool } from "./support.ts";

interface Row {
  figure: string;
  ours: number | null;
  limit: number | null;
  ratio: number | null;
  unit: string;
  target: string;
  met: boolean | null;
}

export interface Report {
  readonly notes: string[];
  readonly raw: Record<string, unknown>;
  row(figure: string, ours: number | null, unit: string, target: string, check: ((v: number) => boolean) | null, limit?: number | null, ratio?: number | null): void;
  /** Runs `body` unless `--only` names other sections (several with `|`: `--only "relay|end to end"`). */
  section(name: string, body: () => Promise<void>): Promise<void>;
  /** Prints the table and notes, writes the JSON file; the process's exit code. */
  finish(quick: boolean, started: number): Promise<number>;
}

export function createReport(only: string | undefined, raw: Record<string, unknown>): Report {
  const rows: Row[] = [];
  const notes: string[] = [];
  let crashed = false;
  return {
    notes,
    raw,
    row(figure, ours, unit, target, check, limit = null, ratio = null) {
      const judged = ratio ?? ours;
      rows.push({ figure, ours, limit, ratio, unit, target, met: check && judged !== null && Number.isFinite(judged) ? check(judged) : null });
    },
    async section(name, body) {
      if (only !== undefined && !only.split("|").some((part) => name.includes(part))) return;
      try {
        await body();
      } catch (error) {
        if (error instanceof MissingTool) {
          notes.push(`${name}: skipped: ${error.message}`);
          console.error(`bench: ${name} skipped: ${error.message}`);
          return;
        }
        crashed = true;
        const message = error instanceof Error ? error.message : String(error);
        notes.push(`${name}: failed: ${message}`);
        console.error(`bench: ${name} failed: ${message}`);
      }
    },
    async finish(quick, started) {
      printTable(rows, notes);
      console.log(`(${quick ? "quick" : "full"} run, ${Math.round((Date.now() - started) / 1000)} s; ratios are medians of per-pair ratios)`);
      const stamp = new Date().toISOString().replace(/[:.]/g, "-");
      const file = new URL(`./results/${stamp}${quick ? "-quick" : ""}.json`, import.meta.url).pathname;
      await mkdir(new URL("./results/", import.meta.url).pathname, { recursive: true });
      await writeFile(file, `${JSON.stringify({ date: new Date().toISOString(), rows, notes, raw }, null, 2)}\n`);
      console.log(`results: ${file}`);
      return crashed ? 1 : 0;
    },
  };
}

function printTable(rows: readonly Row[], notes: readonly string[]): void {
  const fmt = (v: number | null, digits = 1): string =>
    v === null || !Number.isFinite(v) ? "-" : Math.abs(v) >= 100 ? String(Math.round(v)) : v.toFixed(digits);
  const table = [
    ["figure", "ours", "limit", "ratio", "target", "met?"],
    ...rows.map((r) => [r.figure, `${fmt(r.ours)} ${r.unit}`, r.limit === null ? "-" : `${fmt(r.limit)} ${r.unit}`, fmt(r.ratio, 2), r.target, r.met === null ? "" : r.met ? "yes" : "NO"]),
  ];
  const widths = table[0]!.map((_, c) => Math.max(...table.map((line) => line[c]!.length)));
  for (const line of table) console.log(line.map((cell, c) => cell.padEnd(widths[c]!)).join("  ").trimEnd());
  for (const note of notes) console.log(`note: ${note}`);
}

/** A bench script run alone: its one section, the table, the JSON file; exits with the code `bun run bench` would. */
export async function runAlone(name: string, body: (report: Report) => Promise<void>): Promise<never> {
  const started = Date.now();
  const report = createReport(undefined, {});
  await report.section(name, () => body(report));
  process.exit(await report.finish(false, started));
}

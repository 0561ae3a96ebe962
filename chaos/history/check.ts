// `bun run chaos:check FILE`: checks a history (chaos/history/history.ts) and nothing else:
// it imports nothing of the system it judges. Prints what it checked, one line per anomaly
// (its kind first), writes the picture of the run beside the file (FILE.svg, and FILE.png when
// ImageMagick's `convert` is there), and exits 1 on any anomaly (2 on a file it cannot read).
import { readFileSync, writeFileSync } from "node:fs";
import { ANOMALY_KINDS, checkHistory, maxOverlap, type Checked } from "./checker.ts";
import { parseHistory } from "./history.ts";
import { renderPicture } from "./picture.ts";

const file = process.argv[2];
if (file === undefined || process.argv.length > 3) {
  console.error("usage: bun run chaos:check FILE (a history written by bun run chaos:history)");
  process.exit(2);
}
let text: string;
try {
  text = readFileSync(file, "utf8");
} catch (error) {
  console.error(`chaos:check: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  process.exit(2);
}
const parsed = parseHistory(text);
if (!parsed.ok) {
  console.error(`chaos:check: ${file}: ${parsed.error}`);
  process.exit(2);
}
const checked = checkHistory(parsed.records);
for (const line of summary(checked)) console.log(line);
const picture = `${file}.svg`;
writeFileSync(picture, renderPicture(checked, `${file}: ${checked.anomalies.length} anomalies`));
console.log(`picture: ${picture}${toPng(picture)}`);
for (const a of checked.anomalies) console.log(`${a.kind} ${a.detail}`);
const counts = ANOMALY_KINDS.map((k) => [k, checked.anomalies.filter((a) => a.kind === k).length] as const).filter(([, n]) => n > 0);
console.log(checked.anomalies.length === 0 ? "valid: no anomaly" : `INVALID: ${counts.map(([k, n]) => `${n} ${k}`).join(", ")}`);
process.exit(checked.anomalies.length === 0 ? 0 : 1);

function summary(c: Checked): string[] {
  const by = (o: string): number => c.operations.filter((op) => op.outcome === o).length;
  const open = c.operations.filter((op) => op.end === undefined).length;
  const fs = [...new Set(c.operations.map((op) => op.f))].map((f) => `${c.operations.filter((op) => op.f === f).length} ${f}`).join(", ");
  const consumers = (list: typeof c.deliveries): string => [...new Set(list.map((a) => a.consumer))].join(", ") || "none";
  const overlap = maxOverlap(c.windows);
  const kinds = [...new Set(c.windows.map((w) => w.f))];
  return [
    `checked: ${c.operations.length} operations (${fs}): ${by("ok")} ok, ${by("fail")} fail, ${by("info")} info (${open} never completed)`,
    `checked: ${c.effects.length} effects under ${new Set(c.effects.map((e) => e.key)).size} keys`,
    `checked: ${c.committed.length} committed events of ${new Set(c.committed.map((e) => e.aggregate)).size} aggregates; ${c.deliveries.length} deliveries (${consumers(c.deliveries)}), ${c.receipts.length} receipts (${consumers(c.receipts)})`,
    `checked: ${c.windows.length} nemesis windows of ${kinds.length} kinds (${kinds.join(", ")}); at most ${overlap.count} at once (${overlap.kinds.join(", ")})`,
  ];
}

/** Converts the SVG to PNG when `convert` is on PATH; what to add to the picture line. */
function toPng(svg: string): string {
  if (Bun.which("convert") === null) return "";
  const png = svg.replace(/\.svg$/, ".png");
  const done = Bun.spawnSync(["convert", svg, png], { stdout: "ignore", stderr: "ignore" });
  return done.exitCode === 0 ? `, ${png}` : "";
}

// The picture of a run, written by hand as SVG: operations completed per second (ok, fail,
// info) and events received per second above, each operation's latency (log scale) below, the
// nemesis's windows shaded across both, one colour per fault, as Jepsen's rate and latency
// plots show them.
import type { Checked, NemesisWindow, Operation } from "./checker.ts";

const WIDTH = 1200;
const PANEL = 260;
const TOP = 40;
const LEFT = 70;
const RIGHT = 220;
const GAP = 50;
const PLOT_W = WIDTH - LEFT - RIGHT;
const ROW = 16;
const OUTCOME_COLOURS = { ok: "#2a9d3a", fail: "#e08a00", info: "#d1242f" } as const;
const RECEIPT_COLOUR = "#3b6fd6";
const FAULT_COLOURS = ["#f4a3a3", "#a3c8f4", "#b7e4a8", "#f4d9a3", "#d8b4f0", "#a8e4de", "#f0b4d8", "#c8c8c8", "#e4e0a8", "#b0b0f0"];

interface Frame {
  readonly t0: number;
  readonly span: number;
  x(time: number): number;
}

export function renderPicture(checked: Checked, title: string): string {
  const times = [...checked.operations.flatMap((o) => [o.start, o.end ?? o.start]), ...checked.receipts.map((r) => r.time), ...checked.windows.flatMap((w) => [w.start, w.stop ?? w.start])];
  const t0 = times.length ? Math.min(...times) : 0;
  const span = Math.max(1000, (times.length ? Math.max(...times) : 0) - t0);
  const frame: Frame = { t0, span, x: (t) => LEFT + Math.min(1, Math.max(0, (t - t0) / span)) * PLOT_W };
  const kinds = [...new Set(checked.windows.map((w) => w.f))];
  const height = TOP + 2 * PANEL + 2 * GAP + kinds.length * ROW + 20;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    `<text x="${LEFT}" y="20" font-size="15">${escape(title)}</text>`,
    ...shading(checked.windows, kinds, frame),
    ...ratePanel(checked, frame, TOP),
    ...latencyPanel(checked.operations, frame, TOP + PANEL + GAP),
    ...timeAxis(frame, TOP + 2 * PANEL + GAP),
    ...gantt(checked.windows, kinds, frame, TOP + 2 * PANEL + 2 * GAP),
    "</svg>",
  ];
  return parts.join("\n");
}

/** Each window shades both panels faintly in its fault's colour (overlaps darken). */
function shading(windows: readonly NemesisWindow[], kinds: readonly string[], frame: Frame): string[] {
  return windows.flatMap((w) => {
    const x = frame.x(w.start);
    const width = Math.max(1, frame.x(w.stop ?? frame.t0 + frame.span) - x).toFixed(1);
    const fill = FAULT_COLOURS[kinds.indexOf(w.f) % FAULT_COLOURS.length];
    return [TOP, TOP + PANEL + GAP].map((y) => `<rect x="${x.toFixed(1)}" y="${y}" width="${width}" height="${PANEL}" fill="${fill}" opacity="0.3"/>`);
  });
}

/** One row per fault under the panels: when each was on, so overlaps read at a glance. */
function gantt(windows: readonly NemesisWindow[], kinds: readonly string[], frame: Frame, y0: number): string[] {
  const out = [`<text x="${LEFT + 4}" y="${y0 - 6}">nemesis</text>`];
  for (const [i, k] of kinds.entries()) {
    const y = y0 + i * ROW;
    out.push(`<text x="${LEFT + PLOT_W + 8}" y="${y + 12}">${escape(k)}</text>`, `<line x1="${LEFT}" x2="${LEFT + PLOT_W}" y1="${y + ROW / 2}" y2="${y + ROW / 2}" stroke="#eee"/>`);
  }
  for (const w of windows) {
    const x = frame.x(w.start);
    const i = kinds.indexOf(w.f);
    out.push(`<rect x="${x.toFixed(1)}" y="${y0 + i * ROW + 2}" width="${Math.max(1, frame.x(w.stop ?? frame.t0 + frame.span) - x).toFixed(1)}" height="${ROW - 4}" fill="${FAULT_COLOURS[i % FAULT_COLOURS.length]}" stroke="#666" stroke-width="0.5"/>`);
  }
  return out;
}

/** Counts per second of the run. */
function perSecond(times: readonly number[], frame: Frame): number[] {
  const buckets = new Array<number>(Math.ceil(frame.span / 1000) + 1).fill(0);
  for (const t of times) buckets[Math.floor((t - frame.t0) / 1000)]! += 1;
  return buckets;
}

function ratePanel(checked: Checked, frame: Frame, y0: number): string[] {
  const series: [string, string, number[]][] = [
    ...(["ok", "fail", "info"] as const).map((o): [string, string, number[]] => [`${o} /s`, OUTCOME_COLOURS[o], perSecond(checked.operations.filter((op) => op.outcome === o && op.end !== undefined).map((op) => op.end!), frame)]),
    ["receipts /s", RECEIPT_COLOUR, perSecond(checked.receipts.map((r) => r.time), frame)],
  ];
  const top = Math.max(1, ...series.flatMap(([, , b]) => b));
  const y = (v: number): number => y0 + PANEL - (v / top) * PANEL;
  const out = [`<rect x="${LEFT}" y="${y0}" width="${PLOT_W}" height="${PANEL}" fill="none" stroke="#444"/>`, `<text x="${LEFT + 4}" y="${y0 + 14}">throughput (per second); max ${top}</text>`];
  for (const [i, [name, colour, buckets]] of series.entries()) {
    const points = buckets.map((v, s) => `${frame.x(frame.t0 + s * 1000 + 500).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    out.push(`<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${points}"/>`);
    out.push(`<text x="${LEFT + PLOT_W - 90}" y="${y0 + 16 + i * 14}" fill="${colour}">${name}</text>`);
  }
  out.push(`<text x="${LEFT - 8}" y="${y0 + 4}" text-anchor="end">${top}</text>`, `<text x="${LEFT - 8}" y="${y0 + PANEL}" text-anchor="end">0</text>`);
  return out;
}

function latencyPanel(operations: readonly Operation[], frame: Frame, y0: number): string[] {
  const done = operations.filter((o) => o.end !== undefined);
  const maxMs = Math.max(10, ...done.map((o) => o.end! - o.start));
  const lo = 1;
  const y = (ms: number): number => y0 + PANEL - (Math.log10(Math.max(lo, ms)) / Math.log10(maxMs)) * PANEL;
  const out = [`<rect x="${LEFT}" y="${y0}" width="${PLOT_W}" height="${PANEL}" fill="none" stroke="#444"/>`, `<text x="${LEFT + 4}" y="${y0 + 14}">latency of each operation (ms, log scale), at its invoke</text>`];
  for (let ms = 1; ms <= maxMs; ms *= 10) {
    out.push(`<line x1="${LEFT}" x2="${LEFT + PLOT_W}" y1="${y(ms).toFixed(1)}" y2="${y(ms).toFixed(1)}" stroke="#ddd"/>`, `<text x="${LEFT - 8}" y="${(y(ms) + 4).toFixed(1)}" text-anchor="end">${ms}</text>`);
  }
  for (const o of done) out.push(`<circle cx="${frame.x(o.start).toFixed(1)}" cy="${y(o.end! - o.start).toFixed(1)}" r="1.6" fill="${OUTCOME_COLOURS[o.outcome]}" opacity="0.6"/>`);
  return out;
}

function timeAxis(frame: Frame, y0: number): string[] {
  const out: string[] = [];
  const step = niceStep(frame.span / 1000);
  for (let s = 0; s <= frame.span / 1000; s += step) out.push(`<text x="${frame.x(frame.t0 + s * 1000).toFixed(1)}" y="${y0 + 16}" text-anchor="middle">${s}s</text>`);
  return out;
}

function niceStep(seconds: number): number {
  for (const step of [1, 2, 5, 10, 15, 30, 60, 120, 300]) if (seconds / step <= 15) return step;
  return 600;
}

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

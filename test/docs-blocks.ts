// The code blocks of a Markdown page that a user pastes: shell (sh, bash, shell) and TypeScript
// (ts, typescript) fences, each with the marker comment on the line before it, if any:
// `<!-- not run: why -->` (skipped, saying why) or `<!-- run: what -->`. A shell block with a
// line `[VAR=value …] bun run dev` starts dev mode in that environment.

export interface DocBlock {
  /** `file:line` of the fence, for the test's name. */
  readonly where: string;
  readonly line: number;
  readonly lang: "sh" | "ts";
  readonly code: string;
  /** Why the block is not run, from `<!-- not run: why -->`. */
  readonly skip?: string;
  /** What `<!-- run: what -->` says (e.g. "servers"). */
  readonly marker?: string;
  /** The block starts `bun run dev`: its environment, and the block's other lines. */
  readonly devStart?: { readonly env: Record<string, string>; readonly rest: string };
}

const FENCE = /^```(\w*)\s*$/;
const MARKER = /^<!--\s*(not run|run):\s*(.*?)\s*-->$/;
const LANGS: Record<string, "sh" | "ts"> = { sh: "sh", bash: "sh", shell: "sh", ts: "ts", typescript: "ts" };
const DEV_LINE = /^((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)bun run dev$/;

export function docBlocks(markdown: string, file: string): DocBlock[] {
  const lines = markdown.split("\n");
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const open = lines[i]!.match(FENCE);
    if (!open) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith("```"));
    if (end < 0) throw new Error(`${file}:${i + 1}: a fence that never closes`);
    const lang = LANGS[open[1]!];
    if (lang !== undefined) blocks.push(block(file, i + 1, lang, lines.slice(i + 1, end).join("\n"), markerBefore(lines, i)));
    i = end;
  }
  return blocks;
}

function markerBefore(lines: readonly string[], fence: number): RegExpMatchArray | undefined {
  for (let j = fence - 1; j >= 0; j -= 1) {
    const line = lines[j]!.trim();
    if (line === "") continue;
    return line.match(MARKER) ?? undefined;
  }
  return undefined;
}

function block(file: string, line: number, lang: "sh" | "ts", code: string, marker: RegExpMatchArray | undefined): DocBlock {
  const base = { where: `${file}:${line}`, line, lang, code };
  if (marker?.[1] === "not run") return { ...base, skip: marker[2] ?? "" };
  const devLine = lang === "sh" ? code.split("\n").find((l) => DEV_LINE.test(l.trim())) : undefined;
  const devStart = devLine === undefined ? undefined : { env: envOf(devLine.trim().match(DEV_LINE)![1]!), rest: code.split("\n").filter((l) => l !== devLine).join("\n") };
  return { ...base, ...(marker ? { marker: marker[2] } : {}), ...(devStart ? { devStart } : {}) };
}

function envOf(assignments: string): Record<string, string> {
  return Object.fromEntries(assignments.trim().split(/\s+/).filter(Boolean).map((pair) => pair.split("=", 2) as [string, string]));
}

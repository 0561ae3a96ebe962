// Reading Prometheus text exposition in tests: samples by name and exact label set, and every
// label value on the page.

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Every sample line of `text` (comments skipped). */
export function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf(" ");
    const name = brace < 0 ? line.slice(0, space) : line.slice(0, brace);
    const labels: Record<string, string> = {};
    if (brace >= 0) for (const m of line.slice(brace + 1, line.lastIndexOf("}")).matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!;
    out.push({ name, labels, value: Number(line.slice(space + 1)) });
  }
  return out;
}

/** The value of the one sample of `name` whose labels are exactly `labels`; undefined if none. */
export function valueOf(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const wanted = Object.entries(labels);
  const hit = samples(text).find(
    (s) => s.name === name && Object.keys(s.labels).length === wanted.length && wanted.every(([k, v]) => s.labels[k] === v),
  );
  return hit?.value;
}

/** Every label value on the page, for "no id in any label" checks. */
export function labelValues(text: string): string[] {
  return samples(text).flatMap((s) => Object.values(s.labels));
}

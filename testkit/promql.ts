// What the monitoring test needs to read PromQL and Prometheus text: the metric names a query
// selects, and the metric families a /metrics page serves with at least one sample.

// Words of PromQL that look like names but are not metrics: set operators and modifiers.
const KEYWORDS = new Set(["and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"]);
// A histogram's series are its name plus one of these (text exposition format).
const HISTOGRAM_SUFFIXES = ["_bucket", "_count", "_sum"] as const;

/**
 * The metric names `expr` selects, as written (a histogram's `_bucket` kept: see canonicalName).
 * Strings, label matchers, ranges, grouping clauses, numbers, durations and Grafana variables
 * are removed first; an identifier followed by "(" is a function or an aggregation.
 */
export function selectedNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, " ")
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
    .replace(/\boffset\s+-?[0-9a-zA-Z]+/g, " ")
    .replace(/\$\{?\w+\}?/g, " ")
    .replace(/(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?![\w:])/g, " ");
  const names = new Set<string>();
  for (const match of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const name = match[0];
    const after = stripped.slice((match.index ?? 0) + name.length);
    if (/^\s*\(/.test(after) || KEYWORDS.has(name.toLowerCase())) continue;
    names.add(name);
  }
  return [...names];
}

/** `name` as its family: a histogram's `_bucket`, `_count` or `_sum` series is the histogram. */
export function canonicalName(name: string, types: ReadonlyMap<string, string>): string {
  if (types.has(name)) return name;
  for (const suffix of HISTOGRAM_SUFFIXES) {
    const base = name.slice(0, -suffix.length);
    if (name.endsWith(suffix) && types.get(base) === "histogram") return base;
  }
  return name;
}

/** `# TYPE <name> <type>` of a /metrics page. */
export function metricTypes(text: string): Map<string, string> {
  const types = new Map<string, string>();
  for (const match of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) types.set(match[1]!, match[2]!);
  return types;
}

/** The families of a /metrics page that have at least one sample line. */
export function exposedFamilies(text: string): Set<string> {
  const types = metricTypes(text);
  const families = new Set<string>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
    if (name !== undefined) families.add(canonicalName(name, types));
  }
  return families;
}

// Strict JSON for request bodies. A name twice is refused (JSON.parse keeps the last, a gateway may keep
// the first); a number must denote an exact safe integer, judged on its text (4900.0, 49e2; not 4900.5).
import { visit, type JSONPath } from "jsonc-parser";

export interface JsonFault {
  /** Dotted path ("a.0.b"); "(body)" for the whole. */
  readonly field: string;
  readonly message: string;
}

type StrictJson =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly faults: readonly JsonFault[]; readonly more?: number };

// Faults named, number text quoted and field path named at most: answers never grow with the body.
export const MAX_FAULTS = 10;
const MAX_QUOTED_CHARS = 32;
export const MAX_FIELD_CHARS = 64;
// Checked on the text before JSON.parse: everything after costs in proportion to the depth.
export const MAX_NESTING_DEPTH = 32;
const NUMBER_RE = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;
const SAFE_DIGITS = 16;
// Nearly every charge body: one member, an integer of at most 15 digits; JSON.parse alone judges it.
const ONE_SMALL_INTEGER_MEMBER = /^[ \t\n\r]*\{[ \t\n\r]*"[^"\\]*"[ \t\n\r]*:[ \t\n\r]*-?(?:0|[1-9]\d{0,14})[ \t\n\r]*\}[ \t\n\r]*$/;

export function parseStrictJson(text: string): StrictJson {
  const oneMember = ONE_SMALL_INTEGER_MEMBER.test(text);
  if (!oneMember && nestsDeeperThan(text, MAX_NESTING_DEPTH)) {
    return { ok: false, faults: [{ field: "(body)", message: `nested deeper than ${MAX_NESTING_DEPTH} levels` }] };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, faults: [{ field: "(body)", message: "not valid JSON" }] };
  }
  if (oneMember) return { ok: true, value };
  const { faults, more } = scan(text);
  if (faults.length === 0) return { ok: true, value };
  return more > 0 ? { ok: false, faults, more } : { ok: false, faults };
}

function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

function scan(text: string): { faults: JsonFault[]; more: number } {
  const faults: JsonFault[] = [];
  let more = 0;
  const names: Set<string>[] = [];
  const fault = (path: JSONPath, message: string) => {
    if (faults.length < MAX_FAULTS) faults.push({ field: fieldOf(path), message });
    else more++;
  };
  try {
    visit(text, {
      onObjectBegin: () => void names.push(new Set()),
      onObjectEnd: () => void names.pop(),
      onObjectProperty(name, _offset, _length, _line, _char, pathOf) {
        const seen = names[names.length - 1]!;
        if (seen.has(name)) fault([...pathOf(), name], "duplicate member name");
        seen.add(name);
      },
      onLiteralValue(value, offset, length, _line, _char, pathOf) {
        if (typeof value !== "number") return;
        const token = text.slice(offset, offset + length);
        const verdict = judgeNumber(token);
        if (verdict !== "integer") fault(pathOf(), `${verdict === "fraction" ? "must be an integer" : "is out of range"}, got ${boundedField(token, MAX_QUOTED_CHARS)}`);
      },
    });
  } catch {
    // Only a nesting deeper than the call stack gets here (the depth is bounded before).
    return { faults: [{ field: "(body)", message: "nested too deeply" }], more: 0 };
  }
  return { faults, more };
}

export function judgeNumber(token: string): "integer" | "fraction" | "out_of_range" {
  const match = NUMBER_RE.exec(token);
  if (!match) return "fraction";
  const [, whole = "", fraction = "", exponent = "0"] = match;
  const digits = (whole + fraction).replace(/^0+/, "");
  if (digits === "") return "integer"; // zero, however written
  const significant = digits.replace(/0+$/, "");
  // significant × 10^scale, significant ending in a non-zero digit: an integer exactly when
  // scale >= 0. Number() of a huge exponent is inexact but keeps the sign and size compared.
  const scale = Number(exponent) - fraction.length + (digits.length - significant.length);
  if (scale < 0) return "fraction";
  if (significant.length + scale > SAFE_DIGITS) return "out_of_range";
  const value = BigInt(significant) * 10n ** BigInt(scale);
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? "integer" : "out_of_range";
}

function fieldOf(path: JSONPath): string {
  return path.length === 0 ? "(body)" : boundedField(path.join("."));
}

export function boundedField(field: string, max = MAX_FIELD_CHARS): string {
  return field.length <= max ? field : `${field.slice(0, max)}…`;
}

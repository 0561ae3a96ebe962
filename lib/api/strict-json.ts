// Strict JSON for request bodies: what JSON.parse lets through but a charge must not.
//  - A member name twice in one object is refused: JSON.parse keeps the last, a gateway or
//    a log reader may keep the first, and the two would disagree on the amount.
//  - A number is judged on its text, never on the double JSON.parse makes of it: it must
//    denote an exact integer (4900, 4900.0, 49e2 and 4.9e3 all denote 4900; 4900.5 and
//    4900.0000000000001 do not) within the safe-integer range, where the double is exact.
//    The bodies of this API hold integers only.
// JSON.parse stays the judge of syntax and builds the value; jsonc-parser's scanner walks
// the same text for member names and number tokens.
import { visit, type JSONPath } from "jsonc-parser";

export interface JsonFault {
  /** Dotted path, as in schema errors: "amountCents", "a.0.b"; "(body)" for the whole. */
  readonly field: string;
  readonly message: string;
}

export type StrictJson =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly faults: readonly JsonFault[] };

// A problem names this many faults at most, so a body full of them stays a small answer.
const MAX_FAULTS = 10;
// A number's text is quoted in a message up to this length.
const MAX_QUOTED_CHARS = 32;
const NUMBER_RE = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;
// Decimal digits of Number.MAX_SAFE_INTEGER (9007199254740991).
const SAFE_DIGITS = 16;
// The shape of nearly every charge body: one member holding an integer of at most 15 digits
// (always a safe integer). Such a text has no name twice and no number the scan would refuse,
// so, once JSON.parse has accepted it, the scan (most of the cost of reading a body) is skipped.
const ONE_SMALL_INTEGER_MEMBER = /^[ \t\n\r]*\{[ \t\n\r]*"[^"\\]*"[ \t\n\r]*:[ \t\n\r]*-?(?:0|[1-9]\d{0,14})[ \t\n\r]*\}[ \t\n\r]*$/;

export function parseStrictJson(text: string): StrictJson {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, faults: [{ field: "(body)", message: "not valid JSON" }] };
  }
  if (ONE_SMALL_INTEGER_MEMBER.test(text)) return { ok: true, value };
  const faults = scan(text);
  return faults.length === 0 ? { ok: true, value } : { ok: false, faults };
}

function scan(text: string): JsonFault[] {
  const faults: JsonFault[] = [];
  const names: Set<string>[] = [];
  const fault = (path: JSONPath, message: string) => {
    if (faults.length < MAX_FAULTS) faults.push({ field: fieldOf(path), message });
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
        if (verdict !== "integer") fault(pathOf(), `${verdict === "fraction" ? "must be an integer" : "is out of range"}, got ${quote(token)}`);
      },
    });
  } catch {
    // Only a nesting deeper than the call stack gets here; such a body is no charge.
    return [{ field: "(body)", message: "nested too deeply" }];
  }
  return faults;
}

/** Whether a JSON number token denotes an exact safe integer, worked out on its digits. */
export function judgeNumber(token: string): "integer" | "fraction" | "out_of_range" {
  const match = NUMBER_RE.exec(token);
  if (!match) return "fraction";
  const [, whole = "", fraction = "", exponent = "0"] = match;
  const digits = (whole + fraction).replace(/^0+/, "");
  if (digits === "") return "integer"; // zero, however written
  const significant = digits.replace(/0+$/, "");
  // The value is significant × 10^scale, and significant ends in a non-zero digit, so it
  // is an integer exactly when scale >= 0. Number() of a huge exponent is inexact but
  // keeps its sign and size, which is all the comparisons below need.
  const scale = Number(exponent) - fraction.length + (digits.length - significant.length);
  if (scale < 0) return "fraction";
  if (significant.length + scale > SAFE_DIGITS) return "out_of_range";
  const value = BigInt(significant) * 10n ** BigInt(scale);
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? "integer" : "out_of_range";
}

function fieldOf(path: JSONPath): string {
  return path.length === 0 ? "(body)" : path.join(".");
}

function quote(token: string): string {
  return token.length <= MAX_QUOTED_CHARS ? token : `${token.slice(0, MAX_QUOTED_CHARS)}…`;
}

// Reading the POST body: media type first (415), then size (413), then strict JSON (400).
// Everything here runs before the database is touched, so nothing is written on failure.
import { ProblemError } from "./problem.ts";
import { boundedField, MAX_FAULTS, parseStrictJson, type JsonFault } from "./strict-json.ts";

// Far above any valid charge body (~30 bytes); small enough that nobody can make the
// server buffer megabytes per request.
export const MAX_BODY_BYTES = 16 * 1024;
// One decoder for every body: decode() without `stream` keeps no state between calls, and
// building a TextDecoder per request cost more than the decoding.
const UTF8 = new TextDecoder("utf-8", { fatal: false });

export function isJsonMediaType(contentType: string | null): boolean {
  if (!contentType) return false;
  // What nearly every client sends, answered without splitting and lowercasing a copy.
  if (contentType === "application/json") return true;
  const essence = contentType.split(";")[0]!.trim().toLowerCase();
  return essence === "application/json" || /^application\/[a-z0-9.+-]+\+json$/.test(essence);
}

/**
 * The body as strict JSON, or throws its problem. `empty`: the value of a body of no bytes, for
 * an operation whose body has no required field (`curl -X POST` sends none, and no Content-Type):
 * absent, an empty body is judged as any other (415 without a JSON Content-Type, else not JSON).
 */
export async function readJsonBody(request: Request, empty?: unknown): Promise<unknown> {
  const contentType = request.headers.get("content-type");
  const length = request.headers.get("content-length");
  if (!isJsonMediaType(contentType)) {
    if (empty !== undefined && contentType === null && (request.body === null || length === "0")) return empty;
    throw new ProblemError("unsupportedMediaType", "Content-Type must be application/json");
  }
  const declared = length === null ? Number.NaN : Number(length);
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  // A declared length within the limit lets the runtime read the body in one native call;
  // only a body of unknown length (chunked) is streamed and counted as it arrives. (Read
  // here rather than in an async helper: each async frame costs a promise per charge.)
  let text: string;
  if (Number.isFinite(declared)) {
    const bytes = await bodyBytes(request);
    if (bytes.byteLength > MAX_BODY_BYTES) throw tooLarge();
    text = UTF8.decode(bytes);
  } else {
    text = await readLimited(request);
  }
  if (text === "" && empty !== undefined) return empty;
  const parsed = parseStrictJson(text);
  if (parsed.ok) return parsed.value;
  throw invalidBody(parsed.faults, parsed.more ?? 0);
}

// A fault's message is ours or TypeBox's fixed words; cut all the same, so no answer grows with input.
const MAX_MESSAGE_CHARS = 160;
// Faults past the named ones are counted up to this many: counting is bounded work too, and
// TypeBox's error walk is lazy, so a body of thousands of unknown members stops early (at
// 10,000 it walked them all while the event loop waited: bench/README.md, hostile bodies).
const MAX_COUNTED_FAULTS = 100;

/**
 * The 400 of a body that is not strict JSON or fails its schema: at most MAX_FAULTS fields
 * named (each cut to a bounded length), then how many more. The body's values are never
 * quoted, so the answer stays a few KiB whatever was sent. `cut`: the count of the rest stopped
 * at MAX_COUNTED_FAULTS, so it is said as "at least".
 */
export function invalidBody(faults: readonly JsonFault[], more: number, cut = false): ProblemError {
  const errors = faults.slice(0, MAX_FAULTS).map((f) => ({ field: boundedField(f.field), message: f.message.slice(0, MAX_MESSAGE_CHARS) }));
  const extra = more + Math.max(0, faults.length - MAX_FAULTS);
  const named = errors.map((e) => `${e.field}: ${e.message}`).join("; ");
  const detail = extra > 0 ? `${named}; and ${cut ? `at least ${extra}` : extra} more` : named;
  return new ProblemError("invalidBody", detail || "the body does not match the schema", { errors });
}

/** Schema faults as TypeBox iterates them (a JSON Pointer and a message), named then counted, lazily. */
export function schemaFaults(errors: Iterable<{ readonly path: string; readonly message: string }>): { faults: JsonFault[]; more: number; cut: boolean } {
  const faults: JsonFault[] = [];
  let more = 0;
  for (const error of errors) {
    if (faults.length < MAX_FAULTS) faults.push({ field: error.path.replace(/^\//, "").replace(/\//g, ".") || "(body)", message: error.message });
    else if (++more >= MAX_COUNTED_FAULTS) return { faults, more, cut: true };
  }
  return { faults, more, cut: false };
}

function tooLarge(): ProblemError {
  return new ProblemError("bodyTooLarge", `the body must be at most ${MAX_BODY_BYTES} bytes`);
}

function bodyBytes(request: Request): Promise<Uint8Array> {
  // bytes() (Bun, Deno, recent workerd) hands over the body without the ArrayBuffer copy
  // arrayBuffer() makes in Bun, measurably cheaper per request.
  const withBytes = request as Request & { bytes?: () => Promise<Uint8Array> };
  return typeof withBytes.bytes === "function" ? withBytes.bytes() : request.arrayBuffer().then((buffer) => new Uint8Array(buffer));
}

async function readLimited(request: Request): Promise<string> {
  if (!request.body) return "";
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return UTF8.decode(concat(chunks, size));
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

// Reading the POST body: media type (415), size (413), strict JSON (400), deadline (408), all
// before the database is touched, so a refusal writes nothing.
import { ProblemError } from "./problem.ts";
import { boundedField, MAX_FAULTS, parseStrictJson, type JsonFault } from "./strict-json.ts";

// Far above any valid body; nobody can make the server buffer megabytes per request.
export const MAX_BODY_BYTES = 16 * 1024;
// One decoder for every body: decode() without `stream` keeps no state between calls.
const UTF8 = new TextDecoder("utf-8", { fatal: false });

function isJsonMediaType(contentType: string | null): boolean {
  if (!contentType) return false;
  if (contentType === "application/json") return true;
  const essence = contentType.split(";")[0]!.trim().toLowerCase();
  return essence === "application/json" || /^application\/[a-z0-9.+-]+\+json$/.test(essence);
}

/** Strict JSON, or throws its problem; `empty`: the value of no body (`curl -X POST` sends none). */
export async function readJsonBody(request: Request, empty?: unknown): Promise<unknown> {
  const contentType = request.headers.get("content-type");
  const length = request.headers.get("content-length");
  if (!isJsonMediaType(contentType)) {
    if (empty !== undefined && contentType === null && (request.body === null || length === "0")) return empty;
    throw new ProblemError("unsupportedMediaType", "Content-Type must be application/json");
  }
  const declared = length === null ? Number.NaN : Number(length);
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  // A declared length is read in one native call; only a chunked body is streamed and counted.
  let text: string;
  if (Number.isFinite(declared)) {
    const bytes = await arriving(request, bodyBytes(request));
    if (bytes.byteLength > MAX_BODY_BYTES) throw tooLarge();
    text = UTF8.decode(bytes);
  } else {
    text = await arriving(request, readLimited(request));
  }
  if (text === "" && empty !== undefined) return empty;
  const parsed = parseStrictJson(text);
  if (parsed.ok) return parsed.value;
  throw invalidBody(parsed.faults, parsed.more ?? 0);
}

// Fault messages are fixed words, cut all the same.
const MAX_MESSAGE_CHARS = 160;
// Faults past the named counted up to this: TypeBox's walk is lazy, so thousands of them stop early.
const MAX_COUNTED_FAULTS = 100;

/** The 400 of a body: MAX_FAULTS fields named, then how many more ("at least" when `cut`); no values. */
export function invalidBody(faults: readonly JsonFault[], more: number, cut = false): ProblemError {
  const errors = faults.slice(0, MAX_FAULTS).map((f) => ({ field: boundedField(f.field), message: f.message.slice(0, MAX_MESSAGE_CHARS) }));
  const extra = more + Math.max(0, faults.length - MAX_FAULTS);
  const named = errors.map((e) => `${e.field}: ${e.message}`).join("; ");
  const detail = extra > 0 ? `${named}; and ${cut ? `at least ${extra}` : extra} more` : named;
  return new ProblemError("invalidBody", detail || "the body does not match the schema", { errors });
}

export function schemaFaults(errors: Iterable<{ readonly path: string; readonly message: string }>): { faults: JsonFault[]; more: number; cut: boolean } {
  const faults: JsonFault[] = [];
  let more = 0;
  for (const error of errors) {
    if (faults.length < MAX_FAULTS) faults.push({ field: error.path.replace(/^\//, "").replace(/\//g, ".") || "(body)", message: error.message });
    else if (++more >= MAX_COUNTED_FAULTS) return { faults, more, cut: true };
  }
  return { faults, more, cut: false };
}

const deadlines = new WeakMap<Request, number>();

/** The body must have arrived by `at` (performance.now() time): a 408 frees its place in flight. */
export function setBodyDeadline(request: Request, at: number): void {
  deadlines.set(request, at);
}

function arriving<T>(request: Request, reading: Promise<T>): Promise<T> {
  const at = deadlines.get(request);
  if (at === undefined) return reading;
  // One promise and one timer a read; what the read does after a timeout is no one's to hear.
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new ProblemError("bodyTimeout", "the request body did not arrive in time (API_BODY_TIMEOUT_MS)")),
      Math.max(0, at - performance.now()),
    );
    reading.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}

function tooLarge(): ProblemError {
  return new ProblemError("bodyTooLarge", `the body must be at most ${MAX_BODY_BYTES} bytes`);
}

function bodyBytes(request: Request): Promise<Uint8Array> {
  // bytes() (Bun, Deno, recent workerd) spares the copy arrayBuffer() makes in Bun.
  const withBytes = request as Request & { bytes?: () => Promise<Uint8Array> };
  return typeof withBytes.bytes === "function" ? withBytes.bytes() : request.arrayBuffer().then((buffer) => new Uint8Array(buffer));
}

async function readLimited(request: Request): Promise<string> {
  if (!request.body) return "";
  const reader = request.body.getReader();
  const decoder = new TextDecoder("utf-8", { fatal: false });
  let text = "";
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    text += decoder.decode(value, { stream: true });
  }
}

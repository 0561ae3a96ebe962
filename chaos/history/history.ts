// The history of a run, one JSON object a line: what the run writes (run.ts) and the only
// thing the checker reads (check.ts). Self-contained on purpose: the checker must know nothing
// of the system it judges, so nothing here may import from lib/ or testkit/.

export type OpType = "invoke" | "ok" | "fail" | "info";
export type OpName = "charge" | "refund" | "capture" | "cancel";

export interface OpRecord {
  readonly type: OpType;
  /** The client process (a logical, single-threaded client: one operation at a time). */
  readonly process: number;
  readonly f: OpName;
  readonly key: string;
  readonly time: number;
  /** ok: the answer's status and the SHA-256 (hex) of its body bytes. */
  readonly status?: number;
  readonly body_sha256?: string;
  /** Anything else the run adds (amount, charge, error): ignored by the checks. */
  readonly [extra: string]: unknown;
}

export interface EffectRecord {
  readonly type: "effect";
  readonly source: string;
  readonly key: string;
  readonly object: string;
  readonly amount: number;
  readonly time: number;
}

export interface CommittedRecord {
  readonly type: "committed";
  readonly event_id: string;
  readonly aggregate: string;
  readonly sequence: number;
}

export interface ArrivalRecord {
  readonly type: "delivery" | "receipt";
  readonly consumer: string;
  readonly event_id: string;
  readonly aggregate: string;
  readonly sequence: number;
  readonly time: number;
  /** "inbox": a delivery the consumer's inbox holds whose line was lost with its process. */
  readonly via?: string;
}

export interface NemesisRecord {
  readonly type: "nemesis";
  readonly f: string;
  readonly phase: "start" | "stop";
  readonly time: number;
}

export type HistoryRecord = OpRecord | EffectRecord | CommittedRecord | ArrivalRecord | NemesisRecord;

const OP_TYPES: ReadonlySet<string> = new Set(["invoke", "ok", "fail", "info"]);
const OP_NAMES: ReadonlySet<string> = new Set(["charge", "refund", "capture", "cancel"]);

/** The records of a history file's text; a line that is not one is an error naming its number. */
export function parseHistory(text: string): { ok: true; records: HistoryRecord[] } | { ok: false; error: string } {
  const records: HistoryRecord[] = [];
  const lines = text.split("\n");
  for (const [index, line] of lines.entries()) {
    if (line.trim() === "") continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      return { ok: false, error: `line ${index + 1} is not JSON` };
    }
    const wrong = recordProblem(value);
    if (wrong) return { ok: false, error: `line ${index + 1}: ${wrong}` };
    records.push(value as HistoryRecord);
  }
  return { ok: true, records };
}

function recordProblem(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return "not an object";
  const r = value as Record<string, unknown>;
  const text = (name: string): boolean => typeof r[name] === "string";
  const num = (name: string): boolean => typeof r[name] === "number" && Number.isFinite(r[name]);
  const type = r.type;
  if (typeof type !== "string") return "no type";
  if (OP_TYPES.has(type)) {
    if (!num("process") || !text("key") || !num("time")) return `${type} needs process, key and time`;
    if (typeof r.f !== "string" || !OP_NAMES.has(r.f)) return `${type} has an unknown f`;
    if (type === "ok" && (!num("status") || !text("body_sha256"))) return "ok needs status and body_sha256";
    return undefined;
  }
  switch (type) {
    case "effect":
      return text("key") && text("object") && num("amount") && num("time") ? undefined : "effect needs key, object, amount and time";
    case "committed":
      return text("event_id") && text("aggregate") && num("sequence") ? undefined : "committed needs event_id, aggregate and sequence";
    case "delivery":
    case "receipt":
      return text("consumer") && text("event_id") && text("aggregate") && num("sequence") && num("time") ? undefined : `${type} needs consumer, event_id, aggregate, sequence and time`;
    case "nemesis":
      return text("f") && (r.phase === "start" || r.phase === "stop") && num("time") ? undefined : "nemesis needs f, phase start|stop and time";
    default:
      return `unknown type ${type}`;
  }
}

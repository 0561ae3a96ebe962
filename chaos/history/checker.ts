// The checks of a history (history.ts), in the way of Jepsen's checkers: they read only what
// happened and know nothing of the system. One anomaly per broken promise, its kind first:
// money moved twice under a key, an answered operation that moved none, two answers of one key
// that differ, an event committed and never delivered, one delivered and never committed,
// an aggregate's events first seen out of order, an event processed twice by one consumer.
import type { ArrivalRecord, CommittedRecord, EffectRecord, HistoryRecord, NemesisRecord, OpRecord } from "./history.ts";

export const ANOMALY_KINDS = ["double-effect", "missing-effect", "divergent-replay", "lost-event", "unexpected-event", "order", "duplicate-effect-at-consumer"] as const;
export type AnomalyKind = (typeof ANOMALY_KINDS)[number];

export interface Anomaly {
  readonly kind: AnomalyKind;
  /** What it is about: the key, or the consumer and the event or aggregate. */
  readonly detail: string;
}

/** One client operation: its invoke and what it ended with (an invoke never completed counts as info). */
export interface Operation {
  readonly process: number;
  readonly f: OpRecord["f"];
  readonly key: string;
  readonly start: number;
  readonly end: number | undefined;
  readonly outcome: "ok" | "fail" | "info";
  readonly status?: number;
  readonly bodySha?: string;
}

export interface NemesisWindow {
  readonly f: string;
  readonly start: number;
  /** Undefined when the history never says it stopped. */
  readonly stop: number | undefined;
}

export interface Checked {
  readonly operations: readonly Operation[];
  readonly effects: readonly EffectRecord[];
  readonly committed: readonly CommittedRecord[];
  readonly deliveries: readonly ArrivalRecord[];
  readonly receipts: readonly ArrivalRecord[];
  readonly windows: readonly NemesisWindow[];
  readonly anomalies: readonly Anomaly[];
}

// Operations whose success means money moved at the processor (a cancel releases a hold).
const MOVES_MONEY: ReadonlySet<string> = new Set(["charge", "refund", "capture"]);

export function checkHistory(records: readonly HistoryRecord[]): Checked {
  const operations = pairOperations(records.filter(isOp));
  const effects = records.filter((r): r is EffectRecord => r.type === "effect");
  const committed = records.filter((r): r is CommittedRecord => r.type === "committed");
  const arrivals = records.filter((r): r is ArrivalRecord => r.type === "delivery" || r.type === "receipt");
  const anomalies = [
    ...effectAnomalies(operations, effects),
    ...replayAnomalies(operations),
    ...eventAnomalies(committed, arrivals),
    ...orderAnomalies(arrivals),
    ...consumerDuplicates(arrivals.filter((a) => a.type === "delivery")),
  ];
  return {
    operations,
    effects,
    committed,
    deliveries: arrivals.filter((a) => a.type === "delivery"),
    receipts: arrivals.filter((a) => a.type === "receipt"),
    windows: nemesisWindows(records.filter((r): r is NemesisRecord => r.type === "nemesis")),
    anomalies,
  };
}

function isOp(r: HistoryRecord): r is OpRecord {
  return r.type === "invoke" || r.type === "ok" || r.type === "fail" || r.type === "info";
}

/** Each process's invoke paired with its next completion, as Jepsen pairs them. */
export function pairOperations(ops: readonly OpRecord[]): Operation[] {
  const open = new Map<number, OpRecord>();
  const out: Operation[] = [];
  const close = (invoke: OpRecord, done: OpRecord | undefined): void => {
    const outcome = done === undefined ? "info" : (done.type as Operation["outcome"]);
    out.push({ process: invoke.process, f: invoke.f, key: invoke.key, start: invoke.time, end: done?.time, outcome, status: done?.status, bodySha: done?.body_sha256 });
  };
  for (const op of ops) {
    const pending = open.get(op.process);
    if (op.type === "invoke") {
      if (pending) close(pending, undefined);
      open.set(op.process, op);
    } else if (pending) {
      close(pending, op);
      open.delete(op.process);
    }
  }
  for (const pending of open.values()) close(pending, undefined);
  return out;
}

function groupBy<T>(items: readonly T[], keyOf: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = keyOf(item);
    const list = groups.get(k);
    if (list) list.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

/** double-effect: more than one effect under a key. missing-effect: an ok of an operation that moves money, none under its key. */
function effectAnomalies(operations: readonly Operation[], effects: readonly EffectRecord[]): Anomaly[] {
  const byKey = groupBy(effects, (e) => e.key);
  const out: Anomaly[] = [];
  for (const [key, list] of byKey) {
    if (list.length < 2) continue;
    const objects = list.map((e) => `${e.object}:${e.amount}`).join(",");
    out.push({ kind: "double-effect", detail: `key=${key} effects=${list.length} objects=${objects}` });
  }
  const okKeys = new Map<string, Operation>();
  for (const op of operations) if (op.outcome === "ok" && MOVES_MONEY.has(op.f)) okKeys.set(op.key, op);
  for (const [key, op] of okKeys) {
    if (!byKey.has(key)) out.push({ kind: "missing-effect", detail: `key=${key} f=${op.f} status=${op.status} process=${op.process}` });
  }
  return out;
}

/** divergent-replay: two oks under one key with different status or bytes. */
function replayAnomalies(operations: readonly Operation[]): Anomaly[] {
  const out: Anomaly[] = [];
  for (const [key, list] of groupBy(operations.filter((o) => o.outcome === "ok"), (o) => o.key)) {
    const answers = new Set(list.map((o) => `${o.status} ${o.bodySha}`));
    if (answers.size > 1) out.push({ kind: "divergent-replay", detail: `key=${key} f=${list[0]!.f} answers=${[...answers].map((a) => a.replace(" ", ":").slice(0, 16)).join(",")}` });
  }
  return out;
}

/** lost-event: committed and never reached a consumer. unexpected-event: reached one, never committed. */
function eventAnomalies(committed: readonly CommittedRecord[], arrivals: readonly ArrivalRecord[]): Anomaly[] {
  const out: Anomaly[] = [];
  const known = new Set(committed.map((c) => c.event_id));
  for (const [consumer, list] of groupBy(arrivals, consumerOf)) {
    const seen = new Set(list.map((a) => a.event_id));
    for (const c of committed) {
      if (!seen.has(c.event_id)) out.push({ kind: "lost-event", detail: `${consumer} event=${c.event_id} aggregate=${c.aggregate} sequence=${c.sequence}` });
    }
    const stray = new Set(list.filter((a) => !known.has(a.event_id)).map((a) => a.event_id));
    for (const id of stray) {
      const a = list.find((x) => x.event_id === id)!;
      out.push({ kind: "unexpected-event", detail: `${consumer} event=${id} aggregate=${a.aggregate} sequence=${a.sequence}` });
    }
  }
  return out;
}

function consumerOf(a: ArrivalRecord): string {
  return `${a.type}:${a.consumer}`;
}

/** order: per consumer and aggregate, first arrivals must be sequence 1, 2, 3, … (no inversion, no gap). */
function orderAnomalies(arrivals: readonly ArrivalRecord[]): Anomaly[] {
  const out: Anomaly[] = [];
  for (const [consumer, list] of groupBy(arrivals, consumerOf)) {
    const firsts = firstArrivals(list);
    for (const [aggregate, seqs] of groupBy(firsts, (a) => a.aggregate)) {
      const order = seqs.map((a) => a.sequence);
      const broken = order.findIndex((s, i) => s !== i + 1);
      if (broken >= 0) out.push({ kind: "order", detail: `${consumer} aggregate=${aggregate} first-arrivals=${order.join(",")} (sequence ${order[broken]} when ${broken + 1} was due)` });
    }
  }
  return out;
}

/** Each event's first arrival, in the order they arrived (time, then the file's order). */
function firstArrivals(list: readonly ArrivalRecord[]): ArrivalRecord[] {
  const sorted = list.map((a, i) => ({ a, i })).sort((x, y) => x.a.time - y.a.time || x.i - y.i);
  const seen = new Set<string>();
  const out: ArrivalRecord[] = [];
  for (const { a } of sorted) {
    if (seen.has(a.event_id)) continue;
    seen.add(a.event_id);
    out.push(a);
  }
  return out;
}

/** duplicate-effect-at-consumer: a consumer processed one event more than once (receipts may repeat). */
function consumerDuplicates(deliveries: readonly ArrivalRecord[]): Anomaly[] {
  const out: Anomaly[] = [];
  for (const [id, list] of groupBy(deliveries, (d) => `${d.consumer} ${d.event_id}`)) {
    if (list.length > 1) out.push({ kind: "duplicate-effect-at-consumer", detail: `delivery:${id.replace(" ", " event=")} times=${list.length}` });
  }
  return out;
}

/** The nemesis's windows: each start paired with the next stop of the same f. */
export function nemesisWindows(records: readonly NemesisRecord[]): NemesisWindow[] {
  const open = new Map<string, number>();
  const out: NemesisWindow[] = [];
  for (const r of [...records].sort((a, b) => a.time - b.time)) {
    const started = open.get(r.f);
    if (r.phase === "start" && started === undefined) open.set(r.f, r.time);
    else if (r.phase === "stop" && started !== undefined) {
      out.push({ f: r.f, start: started, stop: r.time });
      open.delete(r.f);
    }
  }
  for (const [f, start] of open) out.push({ f, start, stop: undefined });
  return out.sort((a, b) => a.start - b.start);
}

/** The most windows open at one moment, and which. */
export function maxOverlap(windows: readonly NemesisWindow[]): { count: number; kinds: string[] } {
  let best = { count: 0, kinds: [] as string[] };
  for (const w of windows) {
    const open = windows.filter((o) => o.start <= w.start && (o.stop === undefined || o.stop > w.start));
    if (open.length > best.count) best = { count: open.length, kinds: open.map((o) => o.f) };
  }
  return best;
}

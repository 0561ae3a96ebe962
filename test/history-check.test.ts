// The history checker (chaos/history/check.ts) on hand-made histories: each anomaly kind in a
// history made to have it, and valid histories (operations whose outcome stayed unknown, with
// and without an effect; redeliveries the inbox dropped; receipts repeated) flagged by none.
// And the nemesis's schedule, which must put at least four faults on at once.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ANOMALY_KINDS, checkHistory, type AnomalyKind } from "../chaos/history/checker.ts";
import { parseHistory, type HistoryRecord } from "../chaos/history/history.ts";
import { FAULTS, overlapOf, schedule } from "../chaos/history/schedule.ts";

const SHA_A = "a".repeat(64);
const SHA_B = "b".repeat(64);

/** A charge by `process` under `key`: its invoke, then `end` (ok with SHA_A unless told). */
function charge(process: number, key: string, time: number, end: "ok" | "fail" | "info", sha = SHA_A, status = 201): HistoryRecord[] {
  const invoke = { type: "invoke", process, f: "charge", key, time } as const;
  const done = end === "ok" ? { type: "ok", process, f: "charge", key, time: time + 5, status, body_sha256: sha } as const : { type: end, process, f: "charge", key, time: time + 5 } as const;
  return [invoke, done];
}

const effect = (key: string, object: string, time: number): HistoryRecord => ({ type: "effect", source: "processor", key, object, amount: 1000, time });
const committed = (id: string, aggregate: string, sequence: number): HistoryRecord => ({ type: "committed", event_id: id, aggregate, sequence });
const delivery = (id: string, aggregate: string, sequence: number, time: number, consumer = "sub"): HistoryRecord => ({ type: "delivery", consumer, event_id: id, aggregate, sequence, time });
const receipt = (id: string, aggregate: string, sequence: number, time: number): HistoryRecord => ({ type: "receipt", consumer: "plain", event_id: id, aggregate, sequence, time });

/** A valid run: two charges answered, each with its effect and its events delivered and received in order. */
function validBase(): HistoryRecord[] {
  return [
    { type: "nemesis", f: "kill-api", phase: "start", time: 1 },
    ...charge(1, "k1", 10, "ok"),
    ...charge(2, "k2", 12, "ok", SHA_B),
    effect("k1", "pi_1", 14),
    effect("k2", "pi_2", 15),
    { type: "nemesis", f: "kill-api", phase: "stop", time: 40 },
    committed("e1", "c1", 1),
    committed("e2", "c1", 2),
    committed("e3", "c2", 1),
    ...[["e1", "c1", 1], ["e3", "c2", 1], ["e2", "c1", 2]].flatMap(([id, agg, seq], i) => [delivery(id as string, agg as string, seq as number, 20 + i), receipt(id as string, agg as string, seq as number, 20 + i)]),
  ];
}

function kinds(records: HistoryRecord[]): AnomalyKind[] {
  return checkHistory(records).anomalies.map((a) => a.kind);
}

describe("valid histories", () => {
  test("a run where every promise held has no anomaly, and its windows and operations are counted", () => {
    const checked = checkHistory(validBase());
    expect(checked.anomalies).toEqual([]);
    expect(checked.operations.map((o) => o.outcome)).toEqual(["ok", "ok"]);
    expect(checked.windows).toEqual([{ f: "kill-api", start: 1, stop: 40 }]);
  });

  test("info operations that took effect, that did not, and one never completed are all allowed", () => {
    const records = [...validBase(), ...charge(3, "k3", 50, "info"), effect("k3", "pi_3", 52), ...charge(4, "k4", 60, "info"), { type: "invoke", process: 5, f: "refund", key: "k5", time: 70 } as const];
    expect(kinds(records)).toEqual([]);
  });

  test("a fail (a 4xx) without effect, a replay of the same answer, a repeated receipt and a cancel without effect are allowed", () => {
    const records = [
      ...validBase(),
      ...charge(3, "k6", 50, "fail"),
      ...charge(3, "k1", 60, "ok"),
      { type: "invoke", process: 4, f: "cancel", key: "k7", time: 61 } as const,
      { type: "ok", process: 4, f: "cancel", key: "k7", time: 62, status: 200, body_sha256: SHA_A } as const,
      receipt("e1", "c1", 1, 80),
    ];
    expect(kinds(records)).toEqual([]);
  });
});

describe("each anomaly kind is found, with what it involves", () => {
  const cases: [AnomalyKind, (base: HistoryRecord[]) => HistoryRecord[], string][] = [
    ["double-effect", (b) => [...b, effect("k1", "pi_9", 30)], "key=k1"],
    ["missing-effect", (b) => b.filter((r) => !(r.type === "effect" && r.key === "k2")), "key=k2"],
    ["divergent-replay", (b) => [...b, ...charge(7, "k1", 60, "ok", SHA_B)], "key=k1"],
    ["lost-event", (b) => [...b, committed("e4", "c2", 2)], "event=e4"],
    ["unexpected-event", (b) => [...b, delivery("e9", "c3", 1, 90), receipt("e9", "c3", 1, 90)], "event=e9"],
    ["order", (b) => b.map((r) => (r.type === "receipt" && r.event_id === "e2" ? { ...r, time: 19 } : r)), "aggregate=c1"],
    ["duplicate-effect-at-consumer", (b) => [...b, delivery("e1", "c1", 1, 95)], "event=e1"],
  ];
  for (const [kind, make, involved] of cases) {
    test(kind, () => {
      const anomalies = checkHistory(make(validBase())).anomalies;
      // An event's anomalies are per consumer: here the subscriber's deliveries and the plain receipts.
      const perConsumer = kind === "unexpected-event" || kind === "lost-event";
      expect(anomalies.map((a) => a.kind)).toEqual(perConsumer ? [kind, kind] : [kind]);
      expect(anomalies[0]!.detail).toContain(involved);
    });
  }

  test("every kind the checker names has a case above", () => {
    expect(cases.map(([k]) => k).sort()).toEqual([...ANOMALY_KINDS].sort());
  });

  test("a gap at a consumer (2 never arrived, 3 did) is order as well as lost-event", () => {
    const records = [...validBase(), committed("e5", "c2", 2), committed("e6", "c2", 3), delivery("e6", "c2", 3, 99)];
    expect(kinds(records).sort()).toEqual(["lost-event", "lost-event", "lost-event", "order"]);
  });
});

describe("the command", () => {
  const dir = mkdtempSync(join(tmpdir(), "history-check-"));
  const run = (records: HistoryRecord[], name: string) => {
    const file = join(dir, name);
    writeFileSync(file, records.map((r) => JSON.stringify(r)).join("\n") + "\n");
    const done = Bun.spawnSync(["bun", "chaos/history/check.ts", file], { stdout: "pipe", stderr: "pipe" });
    return { file, code: done.exitCode, out: done.stdout.toString(), err: done.stderr.toString() };
  };

  test("exits 0 on a valid history, says what it checked and writes the picture", () => {
    const r = run(validBase(), "valid.jsonl");
    expect(r.code).toBe(0);
    expect(r.out).toContain("checked: 2 operations");
    expect(r.out).toContain("checked: 1 nemesis windows");
    expect(existsSync(`${r.file}.svg`)).toBe(true);
  });

  test("exits 1 with one line per anomaly, its kind first", () => {
    const r = run([...validBase(), effect("k1", "pi_9", 30), committed("e4", "c2", 2)], "invalid.jsonl");
    expect(r.code).toBe(1);
    const lines = r.out.split("\n");
    expect(lines.filter((l) => l.startsWith("double-effect "))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith("lost-event "))).toHaveLength(2);
  });

  test("a line that is not a record stops it with one line naming the line", () => {
    const file = join(dir, "broken.jsonl");
    writeFileSync(file, `${JSON.stringify(validBase()[0])}\n{"type":"effect"}\n`);
    const done = Bun.spawnSync(["bun", "chaos/history/check.ts", file], { stderr: "pipe" });
    expect(done.exitCode).toBe(2);
    expect(done.stderr.toString().trim()).toBe(`chaos:check: ${file}: line 2: effect needs key, object, amount and time`);
    expect(parseHistory("{}\n").ok).toBe(false);
  });
});

describe("the nemesis's schedule (chaos/history/schedule.ts)", () => {
  test("every seed and duration gives at least four faults at once, none overlapping itself, all within the run, the same each time", () => {
    for (const durationMs of [20_000, 60_000, 75_000, 600_000]) {
      for (let seed = 0; seed < 40; seed++) {
        const windows = schedule(seed, durationMs);
        expect(overlapOf(windows)).toBeGreaterThanOrEqual(4);
        expect(windows.every((w) => w.at >= 0 && w.at + w.ms <= durationMs)).toBe(true);
        for (const f of FAULTS) {
          const own = windows.filter((w) => w.f === f);
          expect(own.every((w, i) => i === 0 || own[i - 1]!.at + own[i - 1]!.ms <= w.at)).toBe(true);
        }
        expect(schedule(seed, durationMs)).toEqual(windows);
      }
    }
  });
});

test("the checker's files import nothing but node: modules and each other", () => {
  for (const file of ["check.ts", "checker.ts", "history.ts", "picture.ts"]) {
    const text = readFileSync(join(import.meta.dir, "../chaos/history", file), "utf8");
    const sources = [...text.matchAll(/^import[^;]*? from "([^"]+)";/gm)].map((m) => m[1]!);
    expect(sources.filter((s) => !s.startsWith("node:") && !/^\.\/(check|checker|history|picture)\.ts$/.test(s))).toEqual([]);
  }
});

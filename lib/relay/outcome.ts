// What became of each publish of a batch, and how the batch's rows are settled from it.
import { describeMqttError, reasonCodeOf } from "../platform/mqtt-errors.ts";
import { topicOf } from "../charges/events.ts";
import type { Failure, OutboxRow, Release } from "./outbox-sql.ts";
import { ConnectionLost } from "./window.ts";
import { UnencodableMessage } from "./publish-packet.ts";

// Reason codes that fail however often the row is retried, so it is parked at once: not authorized,
// topic name invalid, packet too large, payload format invalid, retain/QoS unsupported.
const NEVER_SUCCEEDS = new Set([0x87, 0x90, 0x95, 0x99, 0x9a, 0x9b]);
// DISCONNECT reason codes that blame the packet the broker was reading: those above and 0x80-0x83;
// any other (shutting down, busy, keep-alive...) says nothing about the row.
const BLAMES_THE_MESSAGE = new Set([...NEVER_SUCCEEDS, 0x80, 0x81, 0x82, 0x83]);
// Closes with this row oldest in flight before it fails: a broker refusing it without a reason
// (MQTT 3.1.1 has no server DISCONNECT) closes every time; a restart rarely catches a row twice.
export const MAX_RELEASES = 3;

export type Outcome =
  | { readonly kind: "acked"; readonly at: number }
  | { readonly kind: "failed"; readonly error: string; readonly park: boolean }
  // The oldest in flight when the connection closed, no reason given: the MAX_RELEASES-th fails.
  | { readonly kind: "suspect"; readonly error: string }
  // The broker went away: no attempt counted.
  | { readonly kind: "released"; readonly error: string };

export type BatchResult = ReturnType<typeof tally>["result"] & {
  readonly answeredMs: number;
  /** Short from the top of the pending index proves nothing due is left. */
  readonly fromTop: boolean;
  readonly full: boolean;
};

export const EMPTY_RESULT: BatchResult = { claimed: 0, published: 0, answeredMs: 0, fromTop: true, full: false, lags: new Map(), errors: new Map() };

export function classify(error: unknown, brokerConnected: boolean): Outcome {
  const description = describeMqttError(error);
  if (error instanceof ConnectionLost) {
    const code = error.code;
    if (!error.oldestInFlight) return { kind: "released", error: description };
    if (code !== undefined && BLAMES_THE_MESSAGE.has(code)) return { kind: "failed", error: description, park: NEVER_SUCCEEDS.has(code) };
    return { kind: "suspect", error: description };
  }
  if (error instanceof UnencodableMessage) return { kind: "failed", error: description, park: true };
  const code = reasonCodeOf(error);
  if (code !== undefined && NEVER_SUCCEEDS.has(code)) return { kind: "failed", error: description, park: true };
  if (!brokerConnected) return { kind: "released", error: description };
  return { kind: "failed", error: description, park: false };
}

export function tally(topicPrefix: string, rows: readonly OutboxRow[], outcomes: readonly Outcome[]) {
  const acked: string[] = [];
  const failures: Failure[] = [];
  const releases: Release[] = [];
  // Per topic: seconds from row created to PUBACK.
  const lags = new Map<string, number[]>();
  const errors = new Map<string, number>();
  // A batch is mostly of one event type: a topic per run of that type, not per row.
  let lastType: string | undefined;
  let lastAggregate: string | undefined;
  let topic = "";
  rows.forEach((row, i) => {
    const outcome = outcomes[i] ?? { kind: "released", error: "no outcome" };
    if (row.eventType !== lastType || row.aggregateType !== lastAggregate) {
      lastType = row.eventType;
      lastAggregate = row.aggregateType;
      topic = topicOf(topicPrefix, row.eventType, row.aggregateType);
    }
    if (outcome.kind === "acked") {
      acked.push(row.tid);
      const lag = Math.max(0, (outcome.at - Date.parse(row.createdAt)) / 1000);
      const topicLags = lags.get(topic);
      if (topicLags) topicLags.push(lag);
      else lags.set(topic, [lag]);
      return;
    }
    errors.set(topic, (errors.get(topic) ?? 0) + 1);
    if (outcome.kind === "failed") failures.push({ id: row.id, error: outcome.error, park: outcome.park });
    else if (outcome.kind === "suspect") {
      const times = row.releases + 1;
      const error = `${outcome.error} (in flight when the connection closed, ${times} time${times === 1 ? "" : "s"})`;
      if (times >= MAX_RELEASES) failures.push({ id: row.id, error, park: false });
      else releases.push({ id: row.id, error });
    }
  });
  return { result: { claimed: rows.length, published: acked.length, lags, errors }, acked, failures, releases };
}

// Per-aggregate order as a subscriber sees it: the FIRST receipt of each event (a redelivery
// after a crash may repeat an earlier event later, which at-least-once allows). For every
// aggregate those must be sequence 1, 2, 3, … in arrival order: no inversion, no gap.
import type { Received } from "./mqtt.ts";

export interface OrderReport {
  /** Aggregates seen. */
  readonly aggregates: number;
  /** Events first received. */
  readonly events: number;
  /** One line per break, the first few only. */
  readonly violations: readonly string[];
  /** Breaks in all. */
  readonly broken: number;
}

// Enough lines to see the pattern of a break without burying a test's output.
const MAX_LINES = 10;

/** Checks the first receipts in `messages` (arrival order); envelopes without a sequence are left out. */
export function firstReceiptOrder(messages: readonly Received[]): OrderReport {
  const seen = new Set<string>();
  const last = new Map<string, number>();
  const violations: string[] = [];
  let broken = 0;
  let events = 0;
  for (const message of messages) {
    const envelope = message.envelope;
    if (!envelope || envelope.sequence === undefined || seen.has(envelope.id)) continue;
    seen.add(envelope.id);
    events += 1;
    const expected = (last.get(envelope.aggregateId) ?? 0) + 1;
    if (envelope.sequence !== expected) {
      broken += 1;
      if (violations.length < MAX_LINES) {
        violations.push(`aggregate ${envelope.aggregateId}: sequence ${envelope.sequence} (${envelope.type}) arrived when ${expected} was due`);
      }
    }
    last.set(envelope.aggregateId, Math.max(last.get(envelope.aggregateId) ?? 0, envelope.sequence));
  }
  return { aggregates: last.size, events, violations, broken };
}

// The effects of the history: money that moved at the processor, read from the simulator's
// own ledger as the run goes (each movement timed when first seen), and named by the operation
// that asked for it: a confirmation by its charge's amount (unique per charge operation), a
// capture by its charge, a refund by its charge and amount (distinct per refund of a charge).
// A movement no operation asked for keeps a key of its own ("unasked:…").
import type { SimLedger } from "../../dev/processor-sim/types.ts";
import type { EffectRecord } from "./history.ts";
import type { Attribution } from "./clients.ts";

// Often enough that an effect's time is near when it happened, rarely enough to cost nothing.
const POLL_MS = 200;

interface Movement {
  readonly kind: "confirm" | "capture" | "refund";
  readonly object: string;
  readonly amount: number;
  readonly chargeId: string;
  /** The payment's amount: the charge operation's, for a capture too. */
  readonly paymentAmount: number;
  readonly time: number;
}

export class LedgerWatch {
  readonly #movements: Movement[] = [];
  readonly #confirmations = new Map<string, number>();
  readonly #captured = new Set<string>();
  readonly #refunds = new Set<string>();
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(private readonly ledger: () => SimLedger) {}

  start(): void {
    this.#timer = setInterval(() => this.poll(), POLL_MS);
  }

  /** Stops polling after one last look. */
  stop(): void {
    clearInterval(this.#timer);
    this.poll();
  }

  poll(): void {
    const now = Date.now();
    const ledger = this.ledger();
    for (const p of ledger.paymentIntents) {
      const chargeId = p.metadata.charge_id ?? "";
      const seen = this.#confirmations.get(p.id) ?? 0;
      for (let n = seen; n < p.confirmations; n++) this.#movements.push({ kind: "confirm", object: p.id, amount: p.amount, chargeId, paymentAmount: p.amount, time: now });
      this.#confirmations.set(p.id, Math.max(seen, p.confirmations));
      // A manual payment's capture is money moved after its confirmation; an automatic one's is the confirmation itself.
      if (p.amountCaptured > 0 && !this.#captured.has(p.id)) {
        this.#captured.add(p.id);
        this.#movements.push({ kind: "capture", object: p.id, amount: p.amountCaptured, chargeId, paymentAmount: p.amount, time: now });
      }
    }
    for (const r of ledger.refunds) {
      if (r.status !== "succeeded" || this.#refunds.has(r.id)) continue;
      this.#refunds.add(r.id);
      this.#movements.push({ kind: "refund", object: r.id, amount: r.amount, chargeId: r.metadata.charge_id ?? "", paymentAmount: 0, time: now });
    }
  }

  /** The effects, each under the key of the operation that asked for it. */
  effects(attribution: Attribution): EffectRecord[] {
    const out: EffectRecord[] = [];
    for (const m of this.#movements) {
      const key = keyOf(m, attribution);
      if (key === null) continue;
      out.push({ type: "effect", source: "processor", key, object: m.object, amount: m.amount, time: m.time });
    }
    return out;
  }
}

/** The operation's key; null for an automatic charge's capture (its confirmation is its effect). */
function keyOf(m: Movement, attribution: Attribution): string | null {
  if (m.kind === "refund") return attribution.refunds.get(`${m.chargeId}:${m.amount}`) ?? `unasked:${m.object}`;
  if (m.kind === "capture") {
    if (attribution.charges.get(m.paymentAmount)?.manual === false) return null;
    return attribution.captures.get(m.chargeId) ?? `unasked:${m.object}:capture`;
  }
  return attribution.charges.get(m.amount)?.key ?? `unasked:${m.object}`;
}

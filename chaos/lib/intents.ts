// Intents driven through the project's client (charges-outbox/client): each worker creates a
// charge through the payment processor, then, when the processor took the money, refunds part
// of it; each an intent with its own key, with bounded concurrency. A charge made with the
// card the processor declines ends with a 402 stored under its key: final, and not refunded.
// What each intent ended with is kept for the invariants (chaos/14-answers-lost.ts).
import { ChargesApiError, PROBLEM, type ChargesClient } from "charges-outbox/client";

/** The simulator's test cards (dev/processor-sim/): one that pays, one that is declined. */
export const PAYING_CARD = "pm_card_visa";
export const DECLINED_CARD = "pm_card_chargeDeclined";

export interface Intent {
  readonly kind: "charge" | "refund";
  /** 0-based, per kind: charge i and its refund share i. */
  readonly index: number;
  readonly idempotencyKey?: string;
  /** The final answer's status: 201, or 402 for a declined charge. */
  readonly status?: number;
  /** The final answer's body: the charge or the refund, or the 402's problem. */
  readonly value?: Readonly<Record<string, unknown>>;
  readonly replayed?: boolean;
  readonly attempts?: number;
  /** The error's type and detail when the intent failed (no final answer). */
  readonly failure?: string;
}

export interface IntentLoad {
  readonly charges: number;
  readonly concurrency: number;
  /** Each intent's deadline, ms. */
  readonly deadlineMs: number;
  /** Charge i is made with the declined card when i % declineEvery === declineEvery - 1. */
  readonly declineEvery: number;
}

/** The intents' outcomes so far; `finished` counts those that ended (success or failure). */
export class IntentLog {
  readonly intents: Intent[] = [];
  get finished(): number {
    return this.intents.length;
  }
  failures(): Intent[] {
    return this.intents.filter((i) => i.failure !== undefined);
  }
}

/** The error class the client throws: this checkout's, or another's (chaos 14's CHAOS_CLIENT_CHECKOUT). */
export type ErrorClass = typeof ChargesApiError;

/** Runs `load.charges` charge intents, each that succeeded followed by a refund of a tenth of it. */
export async function runIntents(client: ChargesClient, load: IntentLoad, log: IntentLog, errors: ErrorClass = ChargesApiError): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < load.charges; i = next++) await chargeThenRefund(client, i, load, log, errors);
  };
  await Promise.all(Array.from({ length: load.concurrency }, worker));
}

/** Charge i's amount: distinct per intent, so a body sent under another intent's key would show. */
export function amountOf(index: number): number {
  return 1000 + index;
}

/** The card charge i is made with. */
export function cardOf(index: number, load: IntentLoad): string {
  return index % load.declineEvery === load.declineEvery - 1 ? DECLINED_CARD : PAYING_CARD;
}

/** A refund's amount: a tenth of its charge. */
export function refundOf(index: number): number {
  return Math.floor(amountOf(index) / 10);
}

async function chargeThenRefund(client: ChargesClient, index: number, load: IntentLoad, log: IntentLog, errors: ErrorClass): Promise<void> {
  let chargeId: string | undefined;
  const { deadlineMs } = load;
  try {
    const a = await client.charges.create({ amountCents: amountOf(index), paymentMethod: cardOf(index, load) }, { deadlineMs });
    chargeId = a.charge.id;
    log.intents.push({ kind: "charge", index, idempotencyKey: a.idempotencyKey, status: 201, value: a.charge, replayed: a.replayed, attempts: a.attempts });
  } catch (error) {
    // A decline is the intent's final answer, as a 201 is: recorded, and nothing to refund.
    if (error instanceof errors && error.status === 402 && error.type === PROBLEM.cardDeclined) {
      log.intents.push({ kind: "charge", index, idempotencyKey: error.idempotencyKey, status: 402, value: error.problem, attempts: error.attempts });
      return;
    }
    log.intents.push({ kind: "charge", index, ...failed(error, errors) });
    log.intents.push({ kind: "refund", index, failure: "not sent: its charge failed" });
    return;
  }
  try {
    const r = await client.refunds.create(chargeId, { amountCents: refundOf(index) }, { deadlineMs });
    log.intents.push({ kind: "refund", index, idempotencyKey: r.idempotencyKey, status: 201, value: r.refund, replayed: r.replayed, attempts: r.attempts });
  } catch (error) {
    log.intents.push({ kind: "refund", index, ...failed(error, errors) });
  }
}

function failed(error: unknown, errors: ErrorClass): Pick<Intent, "failure" | "idempotencyKey"> {
  if (error instanceof errors) return { failure: `${error.status} ${error.type}: ${error.detail}`, idempotencyKey: error.idempotencyKey };
  return { failure: error instanceof Error ? error.message : String(error) };
}

/**
 * The mutation switch's client fetch: a new Idempotency-Key on every try, as a client that
 * makes its key per request instead of per intent does (docs/chaos.md shows it red).
 */
export function newKeyPerTry(url: string, init: RequestInit): Promise<Response> {
  const headers = new Headers(init.headers);
  if (headers.has("idempotency-key")) headers.set("idempotency-key", `"${crypto.randomUUID()}"`);
  return fetch(url, { ...init, headers });
}

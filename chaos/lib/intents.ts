// Intents driven through the project's client (charges-outbox/client): each worker creates a
// charge, then refunds part of it, each an intent with its own key, with bounded concurrency.
// What each intent ended with is kept for the invariants (chaos/14-answers-lost.ts).
import { ChargesApiError, type ChargesClient } from "charges-outbox/client";

export interface Intent {
  readonly kind: "charge" | "refund";
  /** 0-based, per kind: charge i and its refund share i. */
  readonly index: number;
  readonly idempotencyKey?: string;
  /** The charge or the refund as the client answered it. */
  readonly value?: Readonly<Record<string, unknown>>;
  readonly replayed?: boolean;
  readonly attempts?: number;
  /** The error's type and detail when the intent failed. */
  readonly failure?: string;
}

export interface IntentLoad {
  readonly charges: number;
  readonly concurrency: number;
  /** Each intent's deadline, ms. */
  readonly deadlineMs: number;
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

/** Runs `load.charges` charge intents, each followed by a refund of a tenth of it. */
export async function runIntents(client: ChargesClient, load: IntentLoad, log: IntentLog): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < load.charges; i = next++) await chargeThenRefund(client, i, load.deadlineMs, log);
  };
  await Promise.all(Array.from({ length: load.concurrency }, worker));
}

/** Charge i's amount: distinct per intent, so a body sent under another intent's key would show. */
export function amountOf(index: number): number {
  return 1000 + index;
}

async function chargeThenRefund(client: ChargesClient, index: number, deadlineMs: number, log: IntentLog): Promise<void> {
  let chargeId: string | undefined;
  try {
    const a = await client.charges.create({ amountCents: amountOf(index) }, { deadlineMs });
    chargeId = a.charge.id;
    log.intents.push({ kind: "charge", index, idempotencyKey: a.idempotencyKey, value: a.charge, replayed: a.replayed, attempts: a.attempts });
  } catch (error) {
    log.intents.push({ kind: "charge", index, ...failed(error) });
    log.intents.push({ kind: "refund", index, failure: "not sent: its charge failed" });
    return;
  }
  try {
    const r = await client.refunds.create(chargeId, { amountCents: Math.floor(amountOf(index) / 10) }, { deadlineMs });
    log.intents.push({ kind: "refund", index, idempotencyKey: r.idempotencyKey, value: r.refund, replayed: r.replayed, attempts: r.attempts });
  } catch (error) {
    log.intents.push({ kind: "refund", index, ...failed(error) });
  }
}

function failed(error: unknown): Pick<Intent, "failure" | "idempotencyKey"> {
  if (error instanceof ChargesApiError) return { failure: `${error.status} ${error.type}: ${error.detail}`, idempotencyKey: error.idempotencyKey };
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

// The clients of the history run: logical processes (Jepsen's sense: one operation at a time),
// each with its own instance of the project's client (charges-outbox/client, default options:
// only where the API is, a token, and a fetch that notes each answer's bytes), sending charges
// (automatic and manual), refunds, captures and cancels, and now and then an operation again
// under its key with its body. Each operation is recorded as invoke, then ok, fail or info.
// The choices are drawn from the seed; the money they ask for tells the processor's ledger
// which operation moved it (attribution, below).
import { createHash } from "node:crypto";
import { ChargesApiError, ChargesClient, type Created } from "charges-outbox/client";
import { tokenFor } from "../../testkit/auth.ts";
import { seeded } from "../../testkit/http-fault-proxy.ts";
import type { OpName, OpRecord } from "./history.ts";
import type { Recorder } from "./recorder.ts";

const DECLINED_CARD = "pm_card_chargeDeclined";
const PAYING_CARD = "pm_card_visa";
// Statuses that say nothing was done; a 408, 409 (still in flight), 425 or 429 does not.
const NOT_FINAL_4XX: ReadonlySet<number> = new Set([408, 409, 425, 429]);
const MAX_REFUNDS = 2;

/** What lets the run name the operation behind each movement of money in the processor's ledger. */
export class Attribution {
  /** A charge's amount (unique per charge operation) → its key, and whether it is manual. */
  readonly charges = new Map<number, { key: string; manual: boolean }>();
  /** `${chargeId}:${amount}` (distinct per refund of a charge) → the refund's key. */
  readonly refunds = new Map<string, string>();
  /** A charge id → the key of its capture. */
  readonly captures = new Map<string, string>();
  #nextAmount = 1000;
  nextAmount(): number {
    return this.#nextAmount++;
  }
}

interface Sent {
  readonly f: OpName;
  readonly key: string;
  readonly call: () => Promise<Created & { charge?: { id: string }; refund?: { id: string } }>;
  readonly extra: Record<string, unknown>;
}

interface Held {
  readonly id: string;
  readonly amount: number;
  readonly manual: boolean;
  refunds: number;
  settled: boolean;
}

export interface ClientRun {
  readonly done: Promise<void>;
  stop(): void;
}

/** `count` processes against `baseUrl` until stopped. */
export function startClients(baseUrl: string, count: number, seed: number, recorder: Recorder, attribution: Attribution): ClientRun {
  let stopping = false;
  const processes = Array.from({ length: count }, (_, p) => clientProcess(p + 1, baseUrl, seeded(seed * 31 + p), recorder, attribution, () => stopping));
  return { done: Promise.all(processes).then(() => {}), stop: () => void (stopping = true) };
}

async function clientProcess(process: number, baseUrl: string, random: () => number, recorder: Recorder, attribution: Attribution, stopping: () => boolean): Promise<void> {
  const last = { status: 0, sha: "" };
  const client = new ChargesClient({ baseUrl, token: () => tokenFor(), fetch: noting(last) });
  const held: Held[] = [];
  const answered: Sent[] = [];
  while (!stopping()) {
    const sent = choose(client, random, held, answered, attribution);
    const ended = await perform(process, sent, last, recorder);
    if (ended.type === "ok" && !answered.includes(sent)) {
      answered.push(sent);
      afterOk(sent, ended.value, held);
    }
  }
}

/** A fetch that notes the status and body hash of each answer (none: status 0). */
function noting(last: { status: number; sha: string }): (url: string, init: RequestInit) => Promise<Response> {
  return async (url, init) => {
    last.status = 0;
    last.sha = "";
    const response = await fetch(url, init);
    const bytes = new Uint8Array(await response.clone().arrayBuffer());
    last.status = response.status;
    last.sha = createHash("sha256").update(bytes).digest("hex");
    return response;
  };
}

/** The next operation: again under an answered key, a refund, a capture or cancel, or a new charge. */
function choose(client: ChargesClient, random: () => number, held: Held[], answered: Sent[], attribution: Attribution): Sent {
  const r = random();
  if (r < 0.1 && answered.length > 0) return answered[Math.floor(random() * answered.length)]!;
  // Mostly the charge just made, as a shop refunds or captures right after the sale: a
  // charge's events then follow one another closely, and an outage finds several pending.
  const refundable = held.filter((h) => !h.manual && h.refunds < MAX_REFUNDS);
  if (r < 0.35 && refundable.length > 0) return refund(client, pick(refundable, random), attribution);
  const authorized = held.filter((h) => h.manual && !h.settled);
  if (r < 0.55 && authorized.length > 0) return settle(client, pick(authorized, random), random() < 0.7, attribution);
  return charge(client, random, attribution);
}

/** The latest of `list` most of the time, else any. */
function pick<T>(list: readonly T[], random: () => number): T {
  return random() < 0.7 ? list.at(-1)! : list[Math.floor(random() * list.length)]!;
}

function charge(client: ChargesClient, random: () => number, attribution: Attribution): Sent {
  const key = crypto.randomUUID();
  const amount = attribution.nextAmount();
  const manual = random() < 0.25;
  const card = random() < 0.08 ? DECLINED_CARD : PAYING_CARD;
  attribution.charges.set(amount, { key, manual });
  const body = { amountCents: amount, paymentMethod: card, ...(manual && { capture: "manual" as const }) };
  return { f: "charge", key, extra: { amount, manual, card }, call: () => client.charges.create(body, { idempotencyKey: key }) };
}

function refund(client: ChargesClient, charge: Held, attribution: Attribution): Sent {
  const key = crypto.randomUUID();
  charge.refunds += 1;
  const amount = 10 + charge.refunds;
  attribution.refunds.set(`${charge.id}:${amount}`, key);
  return { f: "refund", key, extra: { charge: charge.id, amount }, call: () => client.refunds.create(charge.id, { amountCents: amount }, { idempotencyKey: key }) };
}

/** A capture of all but a cent, or a cancel, of an authorized charge. */
function settle(client: ChargesClient, charge: Held, capture: boolean, attribution: Attribution): Sent {
  const key = crypto.randomUUID();
  charge.settled = true;
  if (!capture) return { f: "cancel", key, extra: { charge: charge.id }, call: () => client.charges.cancel(charge.id, { idempotencyKey: key }) };
  attribution.captures.set(charge.id, key);
  const amount = charge.amount - 1;
  return { f: "capture", key, extra: { charge: charge.id, amount }, call: () => client.charges.capture(charge.id, { amountCents: amount }, { idempotencyKey: key }) };
}

function afterOk(sent: Sent, value: { charge?: { id: string } } | undefined, held: Held[]): void {
  if (sent.f !== "charge" || value?.charge === undefined) return;
  held.push({ id: value.charge.id, amount: sent.extra.amount as number, manual: sent.extra.manual === true, refunds: 0, settled: false });
}

type Ended = { type: "ok"; value: { charge?: { id: string } } } | { type: "fail" | "info" };

/** Invokes `sent`, records its invoke and its end; a 4xx that promises nothing was done is a fail, anything unknown an info. */
async function perform(process: number, sent: Sent, last: { status: number; sha: string }, recorder: Recorder): Promise<Ended> {
  const base = { process, f: sent.f, key: sent.key, ...sent.extra };
  recorder.add({ type: "invoke", time: Date.now(), ...base } as OpRecord);
  try {
    const value = await sent.call();
    recorder.add({ type: "ok", time: Date.now(), status: last.status, body_sha256: last.sha, ...base } as OpRecord);
    return { type: "ok", value };
  } catch (error) {
    const status = error instanceof ChargesApiError ? error.status : 0;
    const type = status >= 400 && status < 500 && !NOT_FINAL_4XX.has(status) ? "fail" : "info";
    const detail = error instanceof ChargesApiError ? `${error.status} ${error.type}` : String(error);
    recorder.add({ type, time: Date.now(), error: detail, ...base } as OpRecord);
    return { type };
  }
}

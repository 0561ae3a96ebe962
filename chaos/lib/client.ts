// The HTTP client side of a scenario: POST /charges with an Idempotency-Key, and a tally of
// every answer (what the summary table counts).
import { sleep } from "../../testkit/wait.ts";
import { authHeaders } from "../../testkit/auth.ts";

// A careful client's pause before it resends, with jitter so retries do not arrive in step.
const RETRY_BACKOFF_MS = 50;
const RETRY_JITTER_MS = 100;

export interface Answer {
  readonly key: string;
  readonly amountCents: number;
  readonly status: number; // 0 = no HTTP answer (connection refused or reset)
  readonly replayed: boolean;
  readonly body: string;
  readonly at: number;
}

export class Tally {
  readonly answers: Answer[] = [];
  get requests(): number {
    return this.answers.length;
  }
  count(pred: (a: Answer) => boolean): number {
    return this.answers.reduce((n, a) => n + (pred(a) ? 1 : 0), 0);
  }
  get fresh201(): number {
    return this.count((a) => a.status === 201 && !a.replayed);
  }
  get replays(): number {
    return this.count((a) => a.replayed);
  }
  /** Keys that got a fresh 201 (a created charge), with how many fresh 201s each got. */
  freshByKey(): Map<string, number> {
    const m = new Map<string, number>();
    for (const a of this.answers) if (a.status === 201 && !a.replayed) m.set(a.key, (m.get(a.key) ?? 0) + 1);
    return m;
  }
  /** Charge ids from every 201 (fresh or replayed). */
  chargeIds(): Set<string> {
    const ids = new Set<string>();
    for (const a of this.answers) {
      if (a.status !== 201) continue;
      try {
        const id = (JSON.parse(a.body) as { id?: unknown }).id;
        if (typeof id === "string") ids.add(id);
      } catch {}
    }
    return ids;
  }
}

/**
 * The headers of every scenario's POST /charges: JSON, the key as an RFC 9651 String, and a
 * bearer token the API started by the harness accepts (the test kit's tenant).
 */
export async function chargeHeaders(key: string): Promise<Record<string, string>> {
  return { "content-type": "application/json", "idempotency-key": `"${key}"`, ...(await authHeaders()) };
}

export async function postCharge(base: string, key: string, amountCents: number, tally?: Tally, timeoutMs = 15_000): Promise<Answer> {
  return postAmount(`${base}/charges`, key, amountCents, tally, timeoutMs);
}

/** POST of `{"amountCents": N}` with the key to `url`; the answer, tallied (status 0: none). */
async function postAmount(url: string, key: string, amountCents: number, tally: Tally | undefined, timeoutMs: number): Promise<Answer> {
  let answer: Answer;
  try {
    const r = await fetch(url, {
      method: "POST",
      headers: await chargeHeaders(key),
      body: JSON.stringify({ amountCents }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = await r.text();
    answer = { key, amountCents, status: r.status, replayed: r.headers.get("idempotent-replayed") === "true", body, at: Date.now() };
  } catch {
    answer = { key, amountCents, status: 0, replayed: false, body: "", at: Date.now() };
  }
  tally?.answers.push(answer);
  return answer;
}

/**
 * What a careful client does: resend the same request with the same key while the answer is
 * 409, 503 or no answer at all, until a final answer or the deadline.
 */
export async function postUntilFinal(base: () => string, key: string, amountCents: number, tally: Tally, deadline: number): Promise<Answer> {
  for (;;) {
    const a = await postCharge(base(), key, amountCents, tally);
    if (![0, 409, 503].includes(a.status) || Date.now() > deadline) return a;
    await sleep(RETRY_BACKOFF_MS + Math.random() * RETRY_JITTER_MS);
  }
}

/** POST /charges/:chargeId/refunds with a key of its own; the answer is tallied like a charge's. */
export function postRefund(base: string, chargeId: string, key: string, amountCents: number, tally?: Tally, timeoutMs = 15_000): Promise<Answer> {
  return postAmount(`${base}/charges/${chargeId}/refunds`, key, amountCents, tally, timeoutMs);
}

/** As postUntilFinal, for a refund: the same key resent while 409, 503 or no answer. */
export async function refundUntilFinal(base: () => string, chargeId: string, key: string, amountCents: number, tally: Tally, deadline: number): Promise<Answer> {
  for (;;) {
    const a = await postRefund(base(), chargeId, key, amountCents, tally);
    if (![0, 409, 503].includes(a.status) || Date.now() > deadline) return a;
    await sleep(RETRY_BACKOFF_MS + Math.random() * RETRY_JITTER_MS);
  }
}

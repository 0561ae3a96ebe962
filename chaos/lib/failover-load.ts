// The load of a scenario that takes the database away: a few clients, each writing charges one
// key after another and resending a key (as a careful client does) until a final answer. Every
// answer is kept with when it was sent and when it came, so a scenario can judge each by its
// order relative to the fault.
import { sleep } from "../../testkit/wait.ts";
import { chargeHeaders, type Tally } from "./client.ts";

const WORKERS = 4;
// Pacing, so the reference subscriber (one inbox transaction per event) keeps up.
const PAUSE_MS = 60;
// A careful client's pause before it resends a refused request, with jitter.
const RETRY_BACKOFF_MS = 50;
const RETRY_JITTER_MS = 100;
// A client gives up on one request after this: far above the API's own request bound (10 s),
// so only a request the API never answers counts as "no answer".
const CLIENT_TIMEOUT_MS = 20_000;
// A key's resends stop after this; an outage lasts seconds.
const KEY_DEADLINE_MS = 60_000;

export interface Sent {
  readonly status: number; // 0 = no HTTP answer (refused, reset or timed out)
  readonly replayed: boolean;
  readonly contentType: string;
  readonly retryAfter: string | null;
  readonly sentAt: number;
  readonly answeredAt: number;
}

export class FailoverLoad {
  readonly sent: Sent[] = [];
  /** Key → the status of its last answer. */
  private readonly finals = new Map<string, number>();
  private loading = true;

  constructor(
    private readonly base: string,
    private readonly tally: Tally,
  ) {}

  /** The clients, until stop(). */
  run(): Promise<void> {
    return Promise.all(Array.from({ length: WORKERS }, (_, w) => this.worker(w))).then(() => {});
  }

  stop(): void {
    this.loading = false;
  }

  get keys(): number {
    return this.finals.size;
  }

  /** Charges created (fresh 201s, not replays) by requests sent after `since`. */
  created(since: number, answeredBefore = Number.POSITIVE_INFINITY): number {
    return this.count((s) => s.status === 201 && !s.replayed && s.sentAt > since && s.answeredAt < answeredBefore);
  }

  /** When the first fresh 201 answered after `since` came (performance.now()), if one did. */
  firstCreatedAfter(since: number): number | undefined {
    return this.sent.find((s) => s.status === 201 && !s.replayed && s.answeredAt > since)?.answeredAt;
  }

  /** 503s answered after `since`. */
  refusedAnswers(since: number): number {
    return this.count((s) => s.status === 503 && s.answeredAt > since);
  }

  /** Every answer (or its absence) that came between `from` and `to`. */
  answeredBetween(from: number, to: number): Sent[] {
    return this.sent.filter((s) => s.answeredAt > from && s.answeredAt < to);
  }

  count(pred: (s: Sent) => boolean): number {
    return this.sent.reduce((n, s) => n + (pred(s) ? 1 : 0), 0);
  }

  /** Keys whose last answer was not a 201. */
  unsettledKeys(): number {
    return [...this.finals.values()].filter((status) => status !== 201).length;
  }

  private async worker(w: number): Promise<void> {
    for (let i = 0; this.loading; i++) {
      const key = crypto.randomUUID();
      const deadline = performance.now() + KEY_DEADLINE_MS;
      for (;;) {
        const status = await this.post(key, 1 + w * 100_000 + i);
        this.finals.set(key, status);
        if (![0, 409, 503].includes(status) || performance.now() > deadline) break;
        await sleep(RETRY_BACKOFF_MS + Math.random() * RETRY_JITTER_MS);
      }
      await sleep(PAUSE_MS);
    }
  }

  private async post(key: string, amountCents: number): Promise<number> {
    const sentAt = performance.now();
    let answer = { status: 0, replayed: false, body: "", contentType: "", retryAfter: null as string | null };
    try {
      const r = await fetch(`${this.base}/charges`, {
        method: "POST",
        headers: await chargeHeaders(key),
        body: JSON.stringify({ amountCents }),
        signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
      });
      const body = await r.text();
      const header = (name: string): string | null => r.headers.get(name);
      answer = { status: r.status, replayed: header("idempotent-replayed") === "true", body, contentType: header("content-type") ?? "", retryAfter: header("retry-after") };
    } catch {
      // no answer
    }
    this.sent.push({ status: answer.status, replayed: answer.replayed, contentType: answer.contentType, retryAfter: answer.retryAfter, sentAt, answeredAt: performance.now() });
    this.tally.answers.push({ key, amountCents, status: answer.status, replayed: answer.replayed, body: answer.body, at: Date.now() });
    return answer.status;
  }
}

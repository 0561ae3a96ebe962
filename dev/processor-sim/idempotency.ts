// Stripe's idempotency layer for v1 POSTs: per API key and Idempotency-Key, the first answer
// whose endpoint began executing is kept (500s included) with a fingerprint of the call; the
// same call again gets it back, another call with that key is an idempotency_error, and a
// call while the first is still running is a 409. Keys are kept 24 hours.

// Stripe prunes keys once they are at least 24 hours old; a key older than that is new again.
export const KEY_RETENTION_MS = 24 * 60 * 60 * 1000;
// Expired keys are swept at most this often, on the way in of a call.
const SWEEP_EVERY_MS = 60_000;

export interface StoredAnswer {
  readonly status: number;
  /** The body as it was sent, replayed byte for byte. */
  readonly body: string;
  readonly requestId: string;
}

interface Entry {
  readonly endpoint: string;
  readonly fingerprint: string;
  /** Undefined while the first call runs. */
  answer: StoredAnswer | undefined;
  storedAt: number;
}

export type Begun =
  | { readonly kind: "fresh"; finish(answer: StoredAnswer | undefined): void }
  | { readonly kind: "replay"; readonly answer: StoredAnswer }
  | { readonly kind: "mismatch"; readonly otherEndpoint: boolean }
  | { readonly kind: "in-flight" };

export class IdempotencyKeys {
  private readonly entries = new Map<string, Entry>();
  private sweptAt = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /** Claims the key for a call, or says why the call is answered without running. */
  begin(apiKey: string, key: string, endpoint: string, fingerprint: string): Begun {
    this.sweep();
    const scope = `${apiKey}\u0000${key}`;
    const entry = this.entries.get(scope);
    if (entry && entry.answer && this.now() - entry.storedAt >= KEY_RETENTION_MS) this.entries.delete(scope);
    const current = this.entries.get(scope);
    if (current) {
      if (current.endpoint !== endpoint || current.fingerprint !== fingerprint) return { kind: "mismatch", otherEndpoint: current.endpoint !== endpoint };
      return current.answer ? { kind: "replay", answer: current.answer } : { kind: "in-flight" };
    }
    const claimed: Entry = { endpoint, fingerprint, answer: undefined, storedAt: this.now() };
    this.entries.set(scope, claimed);
    return {
      kind: "fresh",
      finish: (answer) => {
        if (this.entries.get(scope) !== claimed) return;
        if (!answer) {
          this.entries.delete(scope);
          return;
        }
        claimed.answer = answer;
        claimed.storedAt = this.now();
      },
    };
  }

  private sweep(): void {
    const now = this.now();
    if (now - this.sweptAt < SWEEP_EVERY_MS) return;
    this.sweptAt = now;
    for (const [scope, entry] of this.entries) {
      if (entry.answer && now - entry.storedAt >= KEY_RETENTION_MS) this.entries.delete(scope);
    }
  }
}

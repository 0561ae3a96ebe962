// The subscriber's retry policy against the database: the pause doubles up to a cap, and
// closing the subscriber ends the retries without acknowledging the event in hand.

// Retry pauses: the database away is retried for as long as it takes, doubling to the cap.
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5000;

/** The subscriber is closing: the event in hand gets no PUBACK and comes back in the next session. */
export class Closing extends Error {}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export interface RetryPolicy {
  readonly closing: () => boolean;
  /** Throwing gives up with what it throws. */
  readonly onFailure: (error: unknown, attempt: number) => void;
}

export async function retryWithBackoff<T>(attempt: () => Promise<T>, policy: RetryPolicy): Promise<T> {
  let pause = RETRY_MIN_MS;
  for (let n = 1; ; n += 1) {
    if (policy.closing()) throw new Closing();
    try {
      return await attempt();
    } catch (error) {
      policy.onFailure(error, n);
      await sleep(pause);
      pause = Math.min(RETRY_MAX_MS, pause * 2);
    }
  }
}

// A bounded wait: the one way the project waits for something at most so long.

/**
 * `promise`'s value, or undefined once `ms` have passed or `signal` aborted, whichever comes
 * first (a rejection of `promise` before then rejects). The timer and the listener go with
 * the wait; the promise itself runs on, and its caller decides what a late result means.
 */
export function within<T>(promise: Promise<T>, ms: number, signal?: AbortSignal): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let giveUp: () => void = () => {};
  const bound = new Promise<undefined>((resolve) => {
    giveUp = () => resolve(undefined);
    timer = setTimeout(giveUp, ms);
    if (signal?.aborted) giveUp();
    signal?.addEventListener("abort", giveUp, { once: true });
  });
  return Promise.race([promise, bound]).finally(() => {
    clearTimeout(timer);
    signal?.removeEventListener("abort", giveUp);
  });
}

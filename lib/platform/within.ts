/** A bounded wait: `promise`'s outcome, or undefined once `ms` passed or `signal` aborted (it runs on). */
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

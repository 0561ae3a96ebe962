// A periodic job: run, wait, run again. The wait starts when a run ends, so runs never overlap
// and a slow run pushes the next one back instead of piling runs up behind it.

export type Every = ReturnType<typeof every>;

// `delayMs` is asked again before each wait; `signal` aborts on stop(), for a job of several steps
// to check between them; after a failed run (`onError`) the next comes on time.
interface EveryOptions {
  readonly delayMs: number | (() => number);
  readonly runAtOnce: boolean;
  readonly job: (signal: AbortSignal) => Promise<unknown>;
  readonly onError: (error: unknown) => void;
}

export function every(options: EveryOptions) {
  const stopping = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let run: Promise<void> = Promise.resolve();
  const nextDelayMs = (): number => (typeof options.delayMs === "number" ? options.delayMs : options.delayMs());

  const wait = (): void => {
    if (!stopping.signal.aborted) timer = setTimeout(start, nextDelayMs());
  };
  const start = (): void => {
    // The executor calls the job synchronously and turns a synchronous throw into a rejection.
    run = new Promise<unknown>((resolve) => resolve(options.job(stopping.signal)))
      .then(() => undefined, options.onError)
      .finally(wait);
  };

  if (options.runAtOnce) start();
  else wait();
  return {
    /** No run starts after this; resolves once the run in flight, if any, has ended. */
    async stop(): Promise<void> {
      stopping.abort();
      clearTimeout(timer);
      await run;
    },
  };
}

// A periodic job: run, wait, run again. The wait starts when a run ends, so runs never overlap
// and a slow run pushes the next one back instead of piling runs up behind it.

export interface Every {
  /** No run starts after this; resolves once the run in flight, if any, has ended. */
  stop(): Promise<void>;
}

export interface EveryOptions {
  /** The wait before a run, asked again each time. */
  readonly delayMs: number | (() => number);
  /** Whether the first run starts at once rather than after the first wait. */
  readonly runAtOnce: boolean;
  /** `signal` aborts on stop(): a job of several steps checks it between them. */
  readonly job: (signal: AbortSignal) => Promise<unknown>;
  /** Told about a run that failed; the next run comes on time all the same. */
  readonly onError: (error: unknown) => void;
}

export function every(options: EveryOptions): Every {
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
    async stop() {
      stopping.abort();
      clearTimeout(timer);
      await run;
    },
  };
}

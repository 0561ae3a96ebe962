// The loop's wake-up: a NOTIFY, a broker reconnect or stop() ends the current pause early,
// and a wake that arrives while the loop is busy is remembered for after its drain. A gather
// (gather.ts) sleeps through the NOTIFYs it is there to gather; only stop() ends it.

export type Waker = ReturnType<typeof createWaker>;

export function createWaker() {
  let pending = false;
  let closed = false;
  // Those a wake() ends (pauses), and those only close() ends (sleeps).
  const waiters = new Set<() => void>();
  const sleepers = new Set<() => void>();
  /** Something may be due: end the current pause, or remember it for the next one. */
  const wake = (): void => {
    pending = true;
    for (const waiter of waiters) waiter();
  };
  const wait = (ending: Set<() => void>, ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        ending.delete(done);
        resolve();
      }
      ending.add(done);
      if (closed) done();
    });
  return {
    wake,
    pause: (ms: number): Promise<void> => wait(waiters, ms),
    sleep: (ms: number): Promise<void> => wait(sleepers, ms),
    /** Whether a wake arrived since the last take(); clears it. */
    take(): boolean {
      const was = pending;
      pending = false;
      return was;
    },
    /** From now on every pause and sleep ends at once (the loop is stopping). */
    close(): void {
      closed = true;
      wake();
      for (const sleeper of sleepers) sleeper();
    },
  };
}

// Requests held for a key in flight (Prefer: wait): each waits for a wake-up, not a timer loop.
// A holder in this process wakes its key's waiters when it ends; a completion elsewhere arrives
// as a notify on the relay's channel and wakes every waiter here to read its key again. Nothing
// is held while waiting: no pooled connection, no transaction.

export function createKeyWaits() {
  const byKey = new Map<string, Set<() => void>>();
  let size = 0;
  const settle = (id: string, done: () => void): void => {
    const set = byKey.get(id);
    if (set?.delete(done)) {
      size--;
      if (set.size === 0) byKey.delete(id);
    }
  };
  return {
    /**
     * A wait for `id`, registered before the caller reads the key again so that no wake-up is
     * missed, ending at `endsAt` (performance.now() time). `cancel`: the answer came another way.
     */
    wait(id: string, endsAt: number): { readonly woken: Promise<void>; cancel(): void } {
      let done!: () => void;
      const woken = new Promise<void>((resolve) => {
        const timer = setTimeout(() => done(), Math.max(0, endsAt - performance.now()));
        done = () => {
          clearTimeout(timer);
          settle(id, done);
          resolve();
        };
      });
      let set = byKey.get(id);
      if (set === undefined) byKey.set(id, (set = new Set()));
      set.add(done);
      size++;
      return { woken, cancel: () => done() };
    },
    /** The holder of `id` in this process ended. */
    wake(id: string): void {
      const set = byKey.get(id);
      if (set !== undefined) for (const done of [...set]) done();
    },
    /** A completion elsewhere: every waiter reads its key again. */
    wakeAll(): void {
      for (const set of [...byKey.values()]) for (const done of [...set]) done();
    },
    /** Waiters now: the holders' wake() is skipped when there are none. */
    get size(): number {
      return size;
    },
  };
}

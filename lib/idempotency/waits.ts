// Requests held for a key in flight (Prefer: wait), woken by the key's holder here or by any
// completion notified elsewhere; nothing (no connection, no transaction) is held while waiting.

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
    /** Registered before the caller reads the key again, so that no wake-up is missed. */
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
    wake(id: string): void {
      const set = byKey.get(id);
      if (set !== undefined) for (const done of [...set]) done();
    },
    wakeAll(): void {
      for (const set of [...byKey.values()]) for (const done of [...set]) done();
    },
    /** The holders' wake() is skipped when there are none. */
    get size(): number {
      return size;
    },
  };
}

// Requests held for a key in flight (Prefer: wait): each waits for a wake-up, not a timer loop.
// A holder in this process wakes its key's waiters when it ends; a completion elsewhere arrives
// as a notify on the relay's channel (lib/platform/wakeup.ts) and wakes every waiter here to read
// its key again. Nothing is held while waiting: no pooled connection, no transaction.

export interface KeyWait {
  /** Settles when the key is woken, or at the wait's end. */
  readonly woken: Promise<void>;
  /** Stops waiting (the answer came another way). */
  cancel(): void;
}

export interface KeyWaits {
  /** A wait for `id`, registered now (before the caller reads the key again, so no wake-up is missed), ending at `endsAt` (performance.now() time). */
  wait(id: string, endsAt: number): KeyWait;
  /** The holder of `id` in this process ended. */
  wake(id: string): void;
  /** A completion elsewhere: every waiter reads its key again. */
  wakeAll(): void;
  /** Waiters now: the holders' wake() is skipped when there are none. */
  readonly size: number;
}

export function createKeyWaits(): KeyWaits {
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
    wait(id, endsAt) {
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
    wake(id) {
      const set = byKey.get(id);
      if (set !== undefined) for (const done of [...set]) done();
    },
    wakeAll() {
      for (const set of [...byKey.values()]) for (const done of [...set]) done();
    },
    get size() {
      return size;
    },
  };
}

// Young-generation collections paced by the work done, so that a busy process reuses the
// memory it frees before the allocator hands it back to the kernel.
//
// Bun's allocator (mimalloc) returns memory that stayed free for 100 ms to the kernel
// (madvise), and the next allocation there faults a zeroed page back in; the kernel also
// interrupts the process's other threads to flush their TLBs. The runtime starts a collection
// when a cycle's allocations reach a share of the heap: on a relay drain, less often than every
// 100 ms, so much of what one collection frees waits longer than that to be reused, and goes through
// that round trip. A young collection after every `every` units of work (rows answered, on the
// relay) keeps the cycle short while work flows fast; when it flows slowly, it runs rarely.

export interface GcPacer {
  /** `units` of work were done. */
  count(units: number): void;
}

export const UNPACED: GcPacer = { count() {} };

/** `collect` (runtime.ts youngCollection) after every `every` units, never more than once per turn. */
export function createGcPacer(collect: () => void, every: number): GcPacer {
  if (!(every >= 1)) throw new RangeError(`gc pacing needs a positive number of units, got ${every}`);
  let since = 0;
  let scheduled = false;
  const run = (): void => {
    scheduled = false;
    collect();
  };
  return {
    count(units) {
      since += units;
      if (since < every || scheduled) return;
      since = 0;
      scheduled = true;
      // After this turn's I/O (the relay's publish window writes on nextTick): the collection
      // stops the event loop for a millisecond or two, never between a packet and its write.
      setImmediate(run);
    },
  };
}

// Young-generation collections paced by the work done, so a busy process reuses the memory it frees
// before Bun's mimalloc returns it to the kernel (after 100 ms free) for the next allocation to fault.

/** `count(units)`: so much work was done. */
export type GcPacer = ReturnType<typeof createGcPacer>;

export const UNPACED: GcPacer = { count() {} };

/** `collect` (runtime.ts youngCollection) after every `every` units, never more than once per turn. */
export function createGcPacer(collect: () => void, every: number) {
  if (!(every >= 1)) throw new RangeError(`gc pacing needs a positive number of units, got ${every}`);
  let since = 0;
  let scheduled = false;
  const run = (): void => {
    scheduled = false;
    collect();
  };
  return {
    count(units: number): void {
      since += units;
      if (since < every || scheduled) return;
      since = 0;
      scheduled = true;
      // After this turn's I/O: the pause never falls between a packet and its write.
      setImmediate(run);
    },
  };
}

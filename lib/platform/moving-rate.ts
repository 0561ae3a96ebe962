// A rate from recent events: how many over how long, both decayed with a time constant. The time
// counts the gaps too, so a burst after a quiet spell reads as a few events over it, not a stream.

/** `windowMs`: the time constant; the first add() counts as coming after that long. */
export function createMovingRate(windowMs: number) {
  let count = 0;
  let span = 0;
  let last: number | undefined;
  const since = (at: number): number => (last === undefined ? windowMs : Math.max(0, at - last));
  return {
    /** `n` more events at `at` (performance.now()). */
    add(n: number, at: number): void {
      const gap = since(at);
      const decay = Math.exp(-gap / windowMs);
      count = count * decay + n;
      span = span * decay + gap;
      last = at;
    },
    /** Events per millisecond as of `at`, the time since the last add() counted as empty. */
    perMs(at: number): number {
      const gap = last === undefined ? 0 : since(at);
      const decay = Math.exp(-gap / windowMs);
      const time = span * decay + gap;
      return time > 0 ? (count * decay) / time : 0;
    },
  };
}

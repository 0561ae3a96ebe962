// The gather's judgement of a live stream (lib/relay/loop.ts): drains fed as a stream of the
// given rate would feed them, on a clock of their own. What the relay then does with it (the
// wait, one claim published at once) is checked against a real relay in test/relay-wakeup.test.ts.
import { expect, test } from "bun:test";
import { createGather, createWaker, GATHER_MIN_RATE_PER_S } from "../lib/relay/loop.ts";
import { IN_TURN_MAX } from "../lib/relay/batch.ts";

const MAX_MS = 40;

/** `drains` drains, `everyMs` apart from `startMs`, each claiming what `ratePerS` brought since the last; the waits they were told. */
function stream(gather: ReturnType<typeof createGather>, ratePerS: number, everyMs: number, drains: number, startMs = 10_000): number[] {
  const waits: number[] = [];
  for (let i = 0; i < drains; i++) {
    const at = startMs + i * everyMs;
    waits.push(gather.drained(at, Math.round((ratePerS * everyMs) / 1000)) - at);
  }
  return waits;
}

test("at 200 events/s (a claim of one row every 5 ms) nothing waits", () => {
  const waits = stream(createGather(MAX_MS), 200, 5, 400);
  expect(Math.max(...waits)).toBe(0);
});

test("below the threshold nothing waits, however the rows come", () => {
  const gather = createGather(MAX_MS);
  expect(Math.max(...stream(gather, GATHER_MIN_RATE_PER_S / 2, 4, 200))).toBe(0);
  // Fifty rows that committed together after a quiet second: a burst, not a stream.
  expect(gather.drained(20_000, 50) - 20_000).toBe(0);
});

test("at 2,000 events/s the next drain waits the longest gather, and its claim asks for what came then, with room", () => {
  const gather = createGather(MAX_MS);
  const waits = stream(gather, 2000, 5, 100);
  expect(waits.slice(50).every((w) => w === MAX_MS)).toBe(true);
  // 40 ms at 2,000/s: 80 rows, asked for with a margin.
  const asked = gather.expected(10_000 + 99 * 5 + MAX_MS);
  expect(asked).toBeGreaterThan(80);
  expect(asked).toBeLessThanOrEqual(130);
});

test("at 600 events/s, an API sharing its cores, the drain waits the longest gather too, and its claim goes out at once", () => {
  const gather = createGather(MAX_MS);
  const waits = stream(gather, 600, 5, 100);
  expect(waits.slice(50).every((w) => w === MAX_MS)).toBe(true);
  // 40 ms at 600/s: 24 rows; the claim asks for more than a claim published in turn (batch.ts).
  expect(gather.expected(10_000 + 99 * 5 + MAX_MS)).toBe(IN_TURN_MAX + 1);
});

test("a stream fast enough to fill a claim sooner waits only for that", () => {
  const waits = stream(createGather(MAX_MS), 20_000, 5, 100);
  // 200 rows at 20,000/s: 10 ms.
  expect(waits.at(-1)).toBeCloseTo(10, 0);
});

test("a stream that stops: within five empty gathers nothing waits any more", () => {
  // The rate forgets the stream over about 100 ms (RATE_WINDOW_MS): 2,000/s falls below the
  // threshold of 400/s after four empty gathers (160 ms; three at a threshold of 1,000/s).
  const gather = createGather(MAX_MS);
  stream(gather, 2000, 5, 100);
  let at = 10_000 + 100 * 5;
  const waits: number[] = [];
  for (let i = 0; i < 5; i++) {
    const next = gather.drained(at, 0);
    waits.push(next - at);
    at = next;
  }
  expect(waits.at(-1)).toBe(0);
});

test("RELAY_GATHER_MS=0 gathers nothing", () => {
  expect(Math.max(...stream(createGather(0), 20_000, 5, 100))).toBe(0);
});

test("a gather sleeps through NOTIFYs (wake) and ends at once on stop (close)", async () => {
  const waker = createWaker();
  let ended = false;
  const sleeping = waker.sleep(600_000).then(() => (ended = true));
  waker.wake();
  await new Promise((resolve) => setImmediate(resolve));
  expect(ended).toBe(false);
  waker.close();
  await sleeping;
  expect(ended).toBe(true);
  // A sleep begun after close() does not wait either.
  await waker.sleep(600_000);
});

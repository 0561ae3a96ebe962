// The young-collection pacer (lib/platform/gc-pacer.ts) and the runtime's collection it calls.
import { expect, test } from "bun:test";
import { createGcPacer } from "../lib/platform/gc-pacer.ts";
import { youngCollection } from "../lib/platform/runtime.ts";

/** Resolves after the macrotask the pacer schedules its collection in (setImmediate, FIFO). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function counted(every: number) {
  const state = { collections: 0 };
  return { state, pacer: createGcPacer(() => void (state.collections += 1), every) };
}

test("a collection follows every `every` units, after the turn that reached it, not within it", async () => {
  const { state, pacer } = counted(100);
  for (let i = 0; i < 99; i++) pacer.count(1);
  await nextTurn();
  expect(state.collections).toBe(0);
  pacer.count(1);
  expect(state.collections).toBe(0);
  await nextTurn();
  expect(state.collections).toBe(1);
  pacer.count(150);
  await nextTurn();
  expect(state.collections).toBe(2);
});

test("a turn that does many times `every` units gets one collection; the rest counts toward the next", async () => {
  const { state, pacer } = counted(100);
  pacer.count(100);
  pacer.count(250);
  pacer.count(100);
  await nextTurn();
  expect(state.collections).toBe(1);
  // 350 units came after the first collection was scheduled: the next unit collects again.
  pacer.count(1);
  await nextTurn();
  expect(state.collections).toBe(2);
  pacer.count(99);
  await nextTurn();
  expect(state.collections).toBe(2);
});

test("pacing by fewer than one unit is refused", () => {
  expect(() => createGcPacer(() => {}, 0)).toThrow(RangeError);
  expect(() => createGcPacer(() => {}, Number.NaN)).toThrow(RangeError);
});

test("on Bun the young collection frees young objects nothing refers to any more", async () => {
  const collect = await youngCollection();
  expect(collect).toBeFunction();
  // Made in a function of their own, so no register or stack slot of the test keeps them.
  const young = (): WeakRef<object>[] => Array.from({ length: 100 }, () => new WeakRef({ data: new Array(256).fill(0) }));
  const refs = young();
  // A WeakRef's target is kept until the end of the job that created or read it.
  await nextTurn();
  collect?.();
  // The collector scans the stack conservatively: a stray word may keep one or two alive.
  expect(refs.filter((ref) => ref.deref() !== undefined).length).toBeLessThan(10);
});

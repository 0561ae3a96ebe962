// The periodic-job helper shared by the relay's ops loop and the subscriber's inbox retention.
// Real timers with short waits, synchronized on what happened (waitUntil, promise order),
// except where a run must NOT come: fake timers prove that without waiting.
import { afterEach, expect, jest, test } from "bun:test";
import { every, type Every } from "../lib/platform/every.ts";
import { waitUntil } from "../testkit/wait.ts";

// Short enough to keep the test fast, long enough to tell "after the wait" from "at once".
const WAIT_MS = 20;
// Timers may fire up to a millisecond early on the clock performance.now() reads.
const TIMER_SLACK_MS = 1;

const loops: Every[] = [];
// Every gated run a test left in flight, ended after it so that stop() can return.
const inFlight: Array<() => void> = [];
afterEach(async () => {
  for (const end of inFlight.splice(0)) end();
  for (const loop of loops.splice(0)) await loop.stop();
  jest.useRealTimers();
});

interface Gated {
  readonly started: number;
  /** Ends the run (resolves the job's promise). */
  readonly end: () => void;
  readonly signal: AbortSignal;
}

/** A job whose runs stay in flight until the test ends each one, and a count of the waits asked for. */
function gatedJob(): { runs: Gated[]; waits: () => number; delayMs: () => number; job: (signal: AbortSignal) => Promise<void> } {
  const runs: Gated[] = [];
  let waits = 0;
  const job = (signal: AbortSignal) =>
    new Promise<void>((resolve) => {
      runs.push({ started: performance.now(), end: resolve, signal });
      inFlight.push(resolve);
    });
  const delayMs = () => {
    waits += 1;
    return WAIT_MS;
  };
  return { runs, waits: () => waits, delayMs, job };
}

function start(options: Parameters<typeof every>[0]): Every {
  const loop = every(options);
  loops.push(loop);
  return loop;
}

test("runAtOnce: the first run starts inside every(); the wait for the next starts only when a run has ended", async () => {
  const { runs, waits, delayMs, job } = gatedJob();
  start({ delayMs, runAtOnce: true, job, onError: () => {} });
  expect(runs).toHaveLength(1);
  // In flight: no wait asked for yet, so no second run can be on its way.
  expect(waits()).toBe(0);

  const firstEnded = performance.now();
  runs[0]!.end();
  await waitUntil(() => runs.length === 2, 5_000, "the second run");
  expect(waits()).toBe(1);
  expect(runs[1]!.started - firstEnded).toBeGreaterThanOrEqual(WAIT_MS - TIMER_SLACK_MS);

  const secondEnded = performance.now();
  runs[1]!.end();
  await waitUntil(() => runs.length === 3, 5_000, "the third run");
  expect(runs[2]!.started - secondEnded).toBeGreaterThanOrEqual(WAIT_MS - TIMER_SLACK_MS);
});

/** Lets the promise reactions queued so far run (fake timers stop waitUntil's own). */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

test("not runAtOnce: the first run comes after the first wait", () => {
  jest.useFakeTimers();
  let runs = 0;
  start({ delayMs: 1_000, runAtOnce: false, job: async () => void (runs += 1), onError: () => {} });
  expect(runs).toBe(0);
  jest.advanceTimersByTime(999);
  expect(runs).toBe(0);
  jest.advanceTimersByTime(1);
  expect(runs).toBe(1);
});

test("not runAtOnce: a stop() before the first wait ends means no run at all", async () => {
  jest.useFakeTimers();
  let runs = 0;
  const loop = start({ delayMs: 1_000, runAtOnce: false, job: async () => void (runs += 1), onError: () => {} });
  expect(jest.getTimerCount()).toBe(1);
  await loop.stop();
  expect(jest.getTimerCount()).toBe(0);
  jest.advanceTimersByTime(10_000);
  expect(runs).toBe(0);
});

test("a failed run, rejected or thrown, goes to onError and the next run comes all the same", async () => {
  const errors: unknown[] = [];
  let runs = 0;
  const job = (): Promise<void> => {
    runs += 1;
    if (runs === 1) return Promise.reject(new Error("rejected"));
    if (runs === 2) throw new Error("thrown");
    return Promise.resolve();
  };
  start({ delayMs: 1, runAtOnce: true, job, onError: (error) => errors.push(error) });
  await waitUntil(() => runs >= 3, 5_000, "the run after two failures");
  expect(errors.map((e) => (e instanceof Error ? e.message : String(e)))).toEqual(["rejected", "thrown"]);
});

test("stop() while a run is in flight: the run sees its signal aborted, stop() resolves after the run ends, no wait follows", async () => {
  const events: string[] = [];
  let endRun = (): void => {};
  let waits = 0;
  let seen: AbortSignal | undefined;
  const job = async (signal: AbortSignal): Promise<void> => {
    seen = signal;
    await new Promise<void>((resolve) => (endRun = resolve));
    events.push(`run ended, aborted: ${signal.aborted}`);
  };
  const loop = start({ delayMs: () => (waits += 1), runAtOnce: true, job, onError: () => {} });
  expect(seen?.aborted).toBe(false);
  const stopping = loop.stop().then(() => events.push("stopped"));
  // Ended only now: a stop() that did not wait for the run would already have settled, and
  // "stopped" would come first.
  endRun();
  await stopping;
  expect(events).toEqual(["run ended, aborted: true", "stopped"]);
  await settle();
  expect(waits).toBe(0);
});

test("stop() between runs resolves at once and cancels the wait", async () => {
  jest.useFakeTimers();
  let runs = 0;
  const loop = start({ delayMs: 1_000, runAtOnce: true, job: async () => void (runs += 1), onError: () => {} });
  expect(runs).toBe(1);
  await settle();
  expect(jest.getTimerCount()).toBe(1);
  await loop.stop();
  expect(jest.getTimerCount()).toBe(0);
  jest.advanceTimersByTime(10_000);
  expect(runs).toBe(1);
});

// The one poll-and-wait loop of the test kit, for tests, chaos scenarios and benchmarks.
// Waiting is always on a condition that says what happened, never on a fixed delay.

// How often a condition is probed by default: a probe is a cheap query or a field read.
const POLL_EVERY_MS = 10;
const DEFAULT_TIMEOUT_MS = 10_000;

/** A probe answers the value waited for, or false/undefined/null while it is not there yet. */
export type Probe<T> = () => T | false | undefined | null | Promise<T | false | undefined | null>;

/**
 * Probes until `check` answers something other than false/undefined/null and returns it;
 * rejects at the deadline. A probe that throws ends the wait with its error (e.g. "the
 * process exited before it was ready").
 */
export async function waitUntil<T>(check: Probe<T>, timeoutMs = DEFAULT_TIMEOUT_MS, what = "condition", everyMs = POLL_EVERY_MS): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== false && value !== undefined && value !== null) return value;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/**
 * A plain delay. Only for pacing load (a client's back-off, a soak's timed phase, a
 * benchmark's open-loop schedule), never to wait for something to happen: use waitUntil.
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `promise`, or undefined once `ms` have passed: bounds a wait whose outcome is checked later. */
export { within } from "../lib/platform/within.ts";
